"""Secrets in command lines: what is hidden and what is kept (gpuscope.redact), and a run with
planted secrets whose store, `runs --json` and `sql` output never contain them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from gpuscope.redact import is_secret_name, redact_argv, redact_command, redact_environment

# (command line as the user typed it, what gpuscope stores and shows)
CASES = [
    # vLLM
    (["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--api-key", "sk-vllm-123", "--max-num-batched-tokens", "8192"],
     "vllm serve meta-llama/Llama-3.1-8B-Instruct --api-key *** --max-num-batched-tokens 8192"),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--tokenizer", "hf-internal/tok",
      "--hf-token=hf_AbCdEf", "--kv-cache-dtype", "fp8", "--max-model-len", "4096"],
     "python -m vllm.entrypoints.openai.api_server --model m --tokenizer hf-internal/tok --hf-token=*** "
     "--kv-cache-dtype fp8 --max-model-len 4096"),
    (["vllm", "serve", "m", "--hf-token", "--port", "8000"],  # --hf-token without a value: use the cached login
     "vllm serve m --hf-token --port 8000"),
    (["vllm", "serve", "m", "--ssl-keyfile", "/etc/tls/key.pem", "--ssl-certfile", "/etc/tls/cert.pem"],
     "vllm serve m --ssl-keyfile /etc/tls/key.pem --ssl-certfile /etc/tls/cert.pem"),
    (["vllm", "serve", "m", "--hf-overrides", '{"hf_token": "hf_secret", "rope_scaling": "x"}'],
     'vllm serve m --hf-overrides {"hf_token": "***", "rope_scaling": "x"}'),
    # SGLang
    (["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2-7B", "--api-key", "sglang-key", "--tp", "2"],
     "python -m sglang.launch_server --model-path Qwen/Qwen2-7B --api-key *** --tp 2"),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--admin-api-key=adm1n", "--enable-metrics"],
     "python3 -m sglang.launch_server --model-path m --admin-api-key=*** --enable-metrics"),
    # TGI
    (["text-generation-launcher", "--model-id", "bigscience/bloom", "--max-total-tokens", "2048",
      "--max-input-tokens", "1024", "--api-key", "tgi"],
     "text-generation-launcher --model-id bigscience/bloom --max-total-tokens 2048 --max-input-tokens 1024 --api-key ***"),
    (["env", "HF_TOKEN=hf_tgi_token", "HUGGING_FACE_HUB_TOKEN=hf_2", "CUDA_VISIBLE_DEVICES=0,1",
      "text-generation-launcher", "--model-id", "m"],
     "env HF_TOKEN=*** HUGGING_FACE_HUB_TOKEN=*** CUDA_VISIBLE_DEVICES=0,1 text-generation-launcher --model-id m"),
    # torchrun
    (["torchrun", "--nproc-per-node", "8", "--rdzv-endpoint", "10.0.0.1:29400", "train.py", "--wandb-key", "wb123"],
     "torchrun --nproc-per-node 8 --rdzv-endpoint 10.0.0.1:29400 train.py --wandb-key ***"),
    (["torchrun", "--nnodes=2", "infer.py", "--model", "m", "--max-new-tokens", "128", "--num-key-value-heads", "8"],
     "torchrun --nnodes=2 infer.py --model m --max-new-tokens 128 --num-key-value-heads 8"),
    # URLs
    (["python", "serve.py", "--url", "https://user:hunter2@host/x"], "python serve.py --url https://user:***@host/x"),
    (["python", "bench.py", "--endpoint", "https://ghp_AbC123xyz@api.example.com/v1"],
     "python bench.py --endpoint https://***@api.example.com/v1"),
    (["python", "bench.py", "https://api.example.com/v1?api_key=k123&model=llama"],
     "python bench.py https://api.example.com/v1?api_key=***&model=llama"),
    (["python", "app.py", "--redis", "redis://:redispass@localhost:6379/0"],
     "python app.py --redis redis://:***@localhost:6379/0"),
    # the example
    (["python", "serve.py", "--api-key", "K", "--token=T", "--url", "https://user:P@host/x"],
     "python serve.py --api-key *** --token=*** --url https://user:***@host/x"),
    # several spellings
    (["python", "x.py", "--password", "pw1", "--passwd=pw2", "--db-secret", "s3", "--client_secret", "s4"],
     "python x.py --password *** --passwd=*** --db-secret *** --client_secret ***"),
    (["python", "x.py", "-api-key", "single-dash", "-p", "8080"], "python x.py -api-key *** -p 8080"),
    (["python", "x.py", "--auth", "basic:u:p", "--disable-auth-check", "--no-auth", "--cookie", "sid=abc"],
     "python x.py --auth *** --disable-auth-check --no-auth --cookie ***"),
    (["python", "x.py", "--credentials", "/dev/stdin", "--aws-secret-access-key", "AKIAsecret"],
     "python x.py --credentials *** --aws-secret-access-key ***"),
    (["python", "x.py", "OPENAI_API_KEY=sk-abc", "temperature=0.7"], "python x.py OPENAI_API_KEY=*** temperature=0.7"),
    (["curl", "-H", "Authorization: Bearer tok123", "http://localhost:8000/v1/models"],
     "curl -H Authorization: Bearer *** http://localhost:8000/v1/models"),
    (["bash", "-c", "python serve.py --api-key inner-secret --model m && echo done"],
     "bash -c python serve.py --api-key *** --model m && echo done"),
    (["sh", "-c", "HF_TOKEN=hf_inline vllm serve m --port 8000"], "sh -c HF_TOKEN=*** vllm serve m --port 8000"),
    # LMDeploy and FastChat take several keys after one option
    (["lmdeploy", "serve", "api_server", "internlm/internlm2-chat-7b", "--api-keys", "key-one", "key-two",
      "--server-port", "23333"],
     "lmdeploy serve api_server internlm/internlm2-chat-7b --api-keys *** *** --server-port 23333"),
    (["python3", "-m", "fastchat.serve.openai_api_server", "--host", "0.0.0.0", "--api-keys", "fc1,fc2"],
     "python3 -m fastchat.serve.openai_api_server --host 0.0.0.0 --api-keys ***"),
    # uvicorn-style TLS options: the key file is a path, its password is not
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--ssl-keyfile", "k.pem", "--ssl-keyfile-password", "tlspw"],
     "python -m vllm.entrypoints.openai.api_server --ssl-keyfile k.pem --ssl-keyfile-password ***"),
    # a container launcher: NAME=value inside another option's value
    (["docker", "run", "--gpus", "all", "--env=HF_TOKEN=hf_docker", "-e", "HUGGING_FACE_HUB_TOKEN=hf_e",
      "ghcr.io/huggingface/text-generation-inference:2.0", "--model-id", "m"],
     "docker run --gpus all --env=HF_TOKEN=*** -e HUGGING_FACE_HUB_TOKEN=*** "
     "ghcr.io/huggingface/text-generation-inference:2.0 --model-id m"),
    # Python code given on the command line
    (["python", "-c", "from openai import OpenAI; c = OpenAI(api_key='sk-code', base_url='http://h:8000/v1')"],
     "python -c from openai import OpenAI; c = OpenAI(api_key='***', base_url='http://h:8000/v1')"),
    (["python", "-c", "import os; os.environ['HF_TOKEN'] = 'hf_env_in_code'; import vllm"],
     "python -c import os; os.environ['HF_TOKEN'] = '***'; import vllm"),
    # a quoted value with a space, inside a shell string, and shell punctuation kept
    (["bash", "-lc", "export HF_TOKEN=hf_x; vllm serve m --api-key 'two words' --port 8000"],
     "bash -lc export HF_TOKEN=***; vllm serve m --api-key *** --port 8000"),
    # curl's user:password, a password holding "@", presigned URLs, a header option
    (["curl", "-u", "admin:adm1n", "http://localhost:8000/metrics"], "curl -u admin:*** http://localhost:8000/metrics"),
    (["python", "x.py", "--db", "postgres://u:p@ss@db:5432/x"], "python x.py --db postgres://u:***@db:5432/x"),
    (["python", "dl.py", "https://s3.amazonaws.com/b/w.bin?X-Amz-Credential=AKIA1&X-Amz-Signature=abc1&X-Amz-Expires=60"],
     "python dl.py https://s3.amazonaws.com/b/w.bin?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Expires=60"),
    (["python", "bench.py", "--auth-header", "Bearer sk-hdr", "--num-prompts", "100"],
     "python bench.py --auth-header Bearer *** --num-prompts 100"),
    # vocabulary tokens and switches are not credentials
    (["python", "serve.py", "--eos-token", "</s>", "--image-token", "<image>", "--auth-disabled", "model.py"],
     "python serve.py --eos-token </s> --image-token <image> --auth-disabled model.py"),
    # nothing to hide
    (["python", "examples/tiny_llm.py", "--seconds", "10", "--max-tokens", "64", "--keys", "3"],
     "python examples/tiny_llm.py --seconds 10 --max-tokens 64 --keys 3"),
    (["python", "x.py", "--temperature", "-1", "--top-k", "50"], "python x.py --temperature -1 --top-k 50"),
]


@pytest.mark.parametrize("argv,expected", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_redact_command_lines(argv: list[str], expected: str) -> None:
    assert redact_command(argv) == expected
    # the same line given as one string is redacted the same way
    assert redact_command(" ".join(argv)) == expected
    # redacting twice changes nothing more
    assert redact_command(expected) == expected


def test_secret_names() -> None:
    for name in ("--api-key", "HF_TOKEN", "--hf-token", "WANDB_API_KEY", "--apikey", "--authorization",
                 "--access_token", "DB_PASSWORD", "--pwd", "cookie", "--api-keys", "--access-tokens",
                 "--ssl-keyfile-password", "--auth-header", "--jwt", "X-Amz-Signature", "sig"):
        assert is_secret_name(name), name
    for name in ("--max-tokens", "--tokenizer", "--keys", "--key-value-heads", "--ssl-keyfile", "--disable-auth",
                 "--num-tokens", "--monkey", "--authors", "PATH", "CUDA_VISIBLE_DEVICES", "--hf-token-path",
                 "--num-keys", "--kv-cache-dtype", "--max-num-batched-tokens", "--disable-auth-check",
                 "--tokenizer-mode", "--stop-tokens", "--eos-token", "--pad-token", "--api-key-env", "--token-url",
                 "--auth-disabled", "--sort-keys", "--key-dim"):
        assert not is_secret_name(name), name


SECRET_OPTIONS = ["--api-key", "--hf-token", "--token", "--password", "--client-secret", "--admin-api-key",
                  "--ssl-keyfile-password", "-api-key", "--api_key", "--auth-token", "--access-token",
                  "--wandb-api-key", "--api-keys"]
SECRET_ENV = ["HF_TOKEN", "OPENAI_API_KEY", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
BENIGN = [["vllm", "serve", "meta-llama/Llama-3.1-8B"], ["--max-tokens", "512"], ["--tokenizer", "hf/tok"],
          ["--port", "8000"], ["--disable-auth-check"], ["--enable-prefix-caching"], ["--kv-cache-dtype", "fp8"],
          ["--num-keys", "4"], ["--hf-token", "--trust-remote-code"], ["--key-value-heads", "8"], ["--ssl-keyfile", "/k.pem"],
          ["CUDA_VISIBLE_DEVICES=0,1"], ["--max-num-batched-tokens", "8192"], ["serve.py"], ["--temperature", "-1"]]


def _planted(form: int, option: str, env: str, secret: str) -> list[str]:
    return [
        [option, secret],
        [f"{option}={secret}"],
        [f"{env}={secret}"],
        ["--url", f"https://user:{secret}@host:443/x"],
        ["--url", f"https://{secret}@host/x"],
        ["--endpoint", f"https://h/v1?api_key={secret}&model=m"],
        ["--hf-overrides", f'{{"hf_token": "{secret}"}}'],
        ["--header", f"Authorization: Bearer {secret}"],
    ][form]


@settings(max_examples=300, deadline=None, database=None)
@given(form=st.integers(0, 7), option=st.sampled_from(SECRET_OPTIONS), env=st.sampled_from(SECRET_ENV),
       tail=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.~+=%-]{5,24}", fullmatch=True),
       before=st.lists(st.sampled_from(BENIGN), max_size=4), after=st.lists(st.sampled_from(BENIGN), max_size=4))
def test_a_planted_secret_never_survives(form: int, option: str, env: str, tail: str,
                                         before: list[list[str]], after: list[list[str]]) -> None:
    secret = "Zq" + tail  # no word around it contains "Zq"
    argv = ["python", "-m", "server"] + [w for ws in before for w in ws] + _planted(form, option, env, secret) \
        + [w for ws in after for w in ws]
    shown = [redact_command(argv), redact_command(" ".join(argv)),
             redact_command(["bash", "-c", " ".join(argv)]), redact_command(redact_command(argv))]
    for text in shown:
        assert text is not None and secret not in text, (argv, text)
    # the words around it are kept as written
    assert redact_command(argv).startswith(" ".join(["python", "-m", "server"] + [w for ws in before for w in ws]))


@settings(max_examples=200, deadline=None, database=None)
@given(words=st.lists(st.sampled_from(BENIGN), max_size=8))
def test_ordinary_command_lines_are_kept_as_written(words: list[list[str]]) -> None:
    """Flags without a value (`--disable-auth-check`, a bare `--hf-token`) never eat the next word,
    and counting or configuring names (`--max-tokens`, `--num-keys`) keep their values."""
    argv = ["python", "-m", "server"] + [w for ws in words for w in ws]
    assert redact_command(argv) == " ".join(argv)
    assert redact_argv(argv) == argv


def test_option_value_starting_with_dash_is_not_eaten() -> None:
    assert redact_argv(["x", "--api-key", "--model", "m"]) == ["x", "--api-key", "--model", "m"]


def test_environment_names_only() -> None:
    assert redact_environment(["PATH", "HF_TOKEN", "CUDA_VISIBLE_DEVICES", "OPENAI_API_KEY"]) == [
        "CUDA_VISIBLE_DEVICES", "PATH"]


SECRETS = ("SECRETK_0001", "SECRETT_0002", "SECRETP_0003", "SECRETENV_0004", "SECRETD_0005", "SECRETB_0006")


def test_run_with_planted_secrets_stores_none(tmp_path: Path) -> None:
    """`gpuscope run` with secrets on the command line and in the environment: the program gets
    them as typed, and not one byte of them is in the store, any file next to it, the run
    directory's names and files, or what run, runs and sql print."""
    import hashlib
    import os

    db = tmp_path / "s.duckdb"
    env_secret = SECRETS[3]
    child_args = ["--api-key", SECRETS[0], f"--token={SECRETS[1]}", "--url", f"https://user:{SECRETS[2]}@host/x",
                  f"--env=HF_TOKEN={SECRETS[4]}", "--hf-overrides", f'{{"hf_token": "{SECRETS[5]}"}}']
    # the program proves it got its arguments unchanged without printing them
    code = "import hashlib, sys; print('argv', hashlib.sha256(' '.join(sys.argv[1:]).encode()).hexdigest())"
    cmd = [sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--no-analyze", "--",
           sys.executable, "-c", code, *child_args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HF_TOKEN": env_secret, "GPUSCOPE_DB": str(db)})
    assert p.returncode == 0, p.stderr
    assert f"argv {hashlib.sha256(' '.join(child_args).encode()).hexdigest()}" in p.stdout
    shown = p.stdout + p.stderr
    runs = run_cli("runs", "--db", db, "--json")
    assert runs.code == 0
    (run,) = runs.json()
    assert "--api-key ***" in run["command"] and "--token=***" in run["command"]
    assert "--env=HF_TOKEN=***" in run["command"] and "https://user:***@host/x" in run["command"]
    sql = run_cli("sql", "--db", db, "SELECT * FROM runs", "--json")
    text = run_cli("runs", "--db", db)
    assert sql.code == 0 and text.code == 0
    everything = [shown, runs.out, sql.out, text.out]
    files = [f for f in tmp_path.rglob("*")]
    assert any(f.name == "s.duckdb" for f in files) and any(f.is_dir() for f in files)
    everything += [str(f) for f in files]  # run directory names included
    everything += [f.read_bytes().decode("latin-1") for f in files if f.is_file()]  # the store, its WAL if any
    for secret in SECRETS:
        for where in everything:
            assert secret not in where


def test_old_store_commands_are_redacted_by_migration(tmp_path: Path) -> None:
    import duckdb

    from gpuscope import store

    db = tmp_path / "old.duckdb"
    con = store.connect(db)
    con.execute("INSERT INTO runs (id, name, status, source, created_ns, command) "
                "VALUES (1, 'r', 'complete', 'run', 1, 'python s.py --api-key OLDSECRET')")
    # pretend the store was written by the version before redaction
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    store.connect(db).close()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT command FROM runs").fetchone()[0] == "python s.py --api-key ***"
    con.close()
    assert json.dumps(run_cli("runs", "--db", db, "--json").json()).find("OLDSECRET") == -1


def test_planted_secrets_reach_no_export_report_or_otlp_log(tmp_path: Path) -> None:
    """Secrets on the command line, in the environment and in the OTLP headers of `gpuscope run
    --otlp` (to an endpoint that is down): none of them is in the store, the run's exports
    (perfetto, chrome, parquet, csv), its HTML report, or anything printed."""
    import os
    import socket

    db = tmp_path / "s.duckdb"
    header_secret = "SECRETH_0007"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--otlp", f"http://127.0.0.1:{port}",
           "--", sys.executable, "-c", "print('ok')", "--api-key", SECRETS[0], f"--token={SECRETS[1]}"]
    env = {**os.environ, "HF_TOKEN": SECRETS[3], "GPUSCOPE_DB": str(db),
           "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {header_secret},x-api-key={SECRETS[4]}"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr
    printed = [p.stdout, p.stderr]
    out = tmp_path / "out"
    out.mkdir()
    for fmt, dest in (("perfetto", out / "t.json.gz"), ("chrome", out / "t.json"), ("parquet", out / "pq"),
                      ("csv", out / "csv")):
        r = run_cli("export", "--db", db, "--format", fmt, "--out", dest)
        assert r.code == 0, r.err
        printed += [r.out, r.err]
    r = run_cli("report", "--db", db, "--out", out / "r.html")
    assert r.code == 0, r.err
    printed += [r.out, r.err]
    blobs = list(printed)
    for f in tmp_path.rglob("*"):
        blobs.append(str(f))
        if f.is_file():
            data = f.read_bytes()
            if f.name.endswith(".gz"):
                import gzip

                data = gzip.decompress(data)
            blobs.append(data.decode("latin-1"))
    assert any("ok" in b for b in printed)
    for secret in (*SECRETS[:2], SECRETS[3], SECRETS[4], header_secret):
        for blob in blobs:
            assert secret not in blob


# --- issue 27, class 6: the forms that were stored as typed, and an attacker's variants ----------
# (command line as typed, what must vanish from every form of it, what must stay visible)
_PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAPEMSECRETBODY\n-----END RSA PRIVATE KEY-----"
ATTACKS: list[tuple[list[str], list[str], list[str]]] = [
    # URL fragments and `;` parameters
    (["app", "--callback", "https://h/cb#access_token=FRAGSECRET1&token_type=bearer"], ["FRAGSECRET1"],
     ["https://h/cb#access_token=***", "token_type=bearer"]),
    (["app", "https://h/x?a=1;token=SEMISECRET2;b=2"], ["SEMISECRET2"], ["?a=1;token=***", ";b=2"]),
    (["app", "--conn", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AZKEYSECRET3+/==;"
      "EndpointSuffix=core.windows.net"], ["AZKEYSECRET3"], ["AccountName=acct", "EndpointSuffix=core.windows.net"]),
    (["app", "BlobEndpoint=https://a.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b&sig=SASSECRET4%3D"],
     ["SASSECRET4"], ["BlobEndpoint=https://a.blob.core.windows.net/"]),
    (["azcopy", "copy", "https://a.blob.core.windows.net/c?sv=2022&se=2030&sp=r&sig=SIGSECRET5%2Bx%3D", "."],
     ["SIGSECRET5"], ["sv=2022", "se=2030", "sp=r"]),
    (["app", "--db", "Server=db;Database=d;User Id=u;Password=MSSQLSECRET6;Encrypt=true"], ["MSSQLSECRET6"],
     ["Database=d", "Encrypt=true"]),
    # curl's user:password in every spelling; a uid:gid is not one
    (["curl", "-u", "sk_test_STRIPESECRET7:", "https://api.stripe.com/v1/charges"], ["STRIPESECRET7"],
     ["https://api.stripe.com/v1/charges"]),
    (["curl", "-u", ":COLONSECRET8", "https://h"], ["COLONSECRET8"], ["https://h"]),
    (["curl", "-ualice:JOINEDSECRET9", "https://h"], ["JOINEDSECRET9"], ["-ualice:***"]),
    (["curl", "--user", "alice:USERSECRET10", "--proxy-user", "bob:PROXYSECRET11", "https://h"],
     ["USERSECRET10", "PROXYSECRET11"], ["alice:***", "bob:***"]),
    (["docker", "run", "-u", "1000:1000", "-p", "8000:8000", "img"], [], ["-u 1000:1000", "-p 8000:8000"]),
    # password options by other names
    (["app", "--pass", "PASSSECRET12", "--pw", "PWSECRET13", "--passcode", "CODESECRET14", "--creds", "CREDSECRET15",
      "--cred", "CREDSECRET16"], ["PASSSECRET12", "PWSECRET13", "CODESECRET14", "CREDSECRET15", "CREDSECRET16"],
     ["--pass ***", "--cred ***"]),
    (["openssl", "enc", "-aes256", "-pass", "pass:OSSLSECRET17", "-in", "f"], ["OSSLSECRET17"], ["-pass pass:***", "-in f"]),
    (["openssl", "rsa", "-passin", "pass:OSSLSECRET18", "-passout", "env:OUTVAR", "-in", "k.pem"], ["OSSLSECRET18"],
     ["-passin pass:***", "-passout env:OUTVAR", "-in k.pem"]),
    (["openssl", "pkcs12", "-passin", "file:/run/pw.txt", "-k", "OSSLSECRET19", "-key", "key.pem"], ["OSSLSECRET19"],
     ["-passin file:/run/pw.txt", "-k ***"]),
    (["keytool", "-importkeystore", "-storepass", "KTSECRET20", "-keypass", "KTSECRET21"], ["KTSECRET20", "KTSECRET21"],
     ["-importkeystore"]),
    # JSON arguments, read as JSON
    (["app", "--cfg", '{"token": "ab\\"ESCSECRET22", "model": "m"}'], ["ESCSECRET22"], ['"model": "m"']),
    (["app", "--cfg", '{"password": 12345678, "port": 8000}'], ["12345678"], ['"port": 8000']),
    (["app", "--cfg", '{"auth": {"value": "NESTSECRET23", "n": [1, "NESTSECRET24"]}, "ok": true}'],
     ["NESTSECRET23", "NESTSECRET24"], ['"ok": true']),
    (["app", "--env-json", '[{"name":"api_key","value":"PAIRSECRET25"},{"name":"MODEL","value":"llama"}]'],
     ["PAIRSECRET25"], ['"name":"api_key"', '"value":"llama"']),
    (["app", '--overrides={"hf_token": "EQSECRET26", "rope": {"factor": 4.0}}'], ["EQSECRET26"], ['"factor": 4.0']),
    (["kubectl", "apply", "-f", "-", "--raw", '{"env": [{"Name": "HF_TOKEN", "Value": "K8SSECRET27"}], '
      '"headers": {"Authorization": "Bearer K8SSECRET28"}}'], ["K8SSECRET27", "K8SSECRET28"], ['"Bearer ***"']),
    (["app", "--cfg", '{"token": "DUPSECRET29", "token": "***"}'], ["DUPSECRET29"], []),
    (["app", "--cfg", '{"client_secret": null, "apiKey": -1.5e3, "enabled": false}'], ["-1.5e3"], ['"enabled": false']),
    # a value that starts with a dash
    (["app", "--api-key", "-XDASHSECRET30", "--port", "8000"], ["XDASHSECRET30"], ["--port 8000"]),
    (["app", "--api-key", "-X", "--port", "8000"], [" -X"], ["--api-key ***", "--port 8000"]),
    # headers
    (["curl", "-H", "Authorization: Bearer HDRSECRET31", "--header=Authorization: token HDRSECRET32",
      "-H", "X-Api-Key: HDRSECRET33", "-H", "Private-Token: HDRSECRET34", "https://h"],
     ["HDRSECRET31", "HDRSECRET32", "HDRSECRET33", "HDRSECRET34"], ["Bearer ***", "https://h"]),
    (["http", "POST", "h/api", "Authorization:Basic HDRSECRET35", "X-Auth-Token:HDRSECRET36", "api_key==HDRSECRET37"],
     ["HDRSECRET35", "HDRSECRET36", "HDRSECRET37"], ["h/api"]),
    # databases
    (["env", "PGPASSWORD=PGSECRET38", "psql", "postgresql://app:PGSECRET39@db:5432/prod"], ["PGSECRET38", "PGSECRET39"],
     ["postgresql://app:***@db:5432/prod"]),
    (["mysql", "-h", "db", "-uroot", "-pMYSECRET40", "shop"], ["MYSECRET40"], ["-uroot", "-p***", "shop"]),
    (["mysql", "-u", "root", "-p", "shop"], [], ["-p shop"]),
    (["mongosh", "mongodb+srv://u:MONGOSECRET41@c.mongodb.net/x", "-p", "MONGOSECRET42"],
     ["MONGOSECRET41", "MONGOSECRET42"], []),
    (["redis-cli", "-h", "r", "-a", "REDISSECRET43"], ["REDISSECRET43"], ["-h r"]),
    (["sshpass", "-p", "SSHSECRET44", "ssh", "-p", "2222", "u@h"], ["SSHSECRET44"], ["ssh -p 2222 u@h"]),
    (["docker", "login", "-u", "me", "-p", "DOCKERSECRET45", "ghcr.io"], ["DOCKERSECRET45"], ["-u me", "ghcr.io"]),
    # credentials by their form, wherever they are
    (["python", "up.py", "AKIAIOSFODNN7EXAMPLE", "ghp_" + "A1b2" * 9, "github_pat_11ABCDEFG0" + "x1" * 20,
      "xoxb-1234-5678-SLACKSECRET46", "sk-proj-OPENAISECRET47abc123", "sk-ant-api03-ANTHROPICSECRET48",
      "hf_HFSECRETAbCdEfGhIjKlMnOpQr49", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.JWTSECRET50"],
     ["AKIAIOSFODNN7EXAMPLE", "A1b2A1b2", "x1x1x1", "SLACKSECRET46", "OPENAISECRET47", "ANTHROPICSECRET48",
      "HFSECRET", "JWTSECRET50"], ["python up.py"]),
    (["app", "--private-key", _PEM, "--tls-cert", "c.pem"], ["PEMSECRETBODY"], ["--tls-cert c.pem"]),
    (["app", "--config-text", "key: " + _PEM], ["PEMSECRETBODY"], ["--config-text key: ***"]),
    (["curl", "https://hooks.slack.com/services/T000/B000/SLACKHOOKSECRET51"], ["SLACKHOOKSECRET51"], ["https://hooks.slack.com/services/***"]),
    # names in other spellings
    (["app", "--API-KEY", "CASESECRET52", "--Client-Secret", "CASESECRET53", "--apiKey", "CASESECRET54",
      "--passwordFile", "/run/pw"], ["CASESECRET52", "CASESECRET53", "CASESECRET54"], ["--passwordFile /run/pw"]),
    (["app", "--secret", "S55SECRET", "--client-secret", "S56SECRET", "--private-key", "S57SECRET", "--passphrase",
      "S58SECRET", "--auth", "S59SECRET"], ["S55SECRET", "S56SECRET", "S57SECRET", "S58SECRET", "S59SECRET"], []),
    (["app", "--token=@TOKFILESECRET60"], ["TOKFILESECRET60"], ["--token=***"]),
    # shell strings: export, quotes
    (["bash", "-c", "export HF_TOKEN=EXPSECRET61; export OPENAI_API_KEY='QUOTED SECRET62'; vllm serve m"],
     ["EXPSECRET61", "SECRET62"], ["vllm serve m"]),
    # percent-encoded inside another URL
    (["app", "https://login/cb?next=https%3A%2F%2Fapi%2Fv1%3Faccess_token%3DENCSECRET63%26page%3D2"],
     ["ENCSECRET63"], ["page%3D2"]),
    (["app", "https://login/cb?next=https%3A%2F%2Fuser%3AENCSECRET64%40host%2Fx"], ["ENCSECRET64"], ["user%3A***%40host"]),
    # a secret's name as a positional word, after `set`/`config`
    (["aws", "configure", "set", "aws_secret_access_key", "AWSSECRET65"], ["AWSSECRET65"], ["aws_secret_access_key ***"]),
    (["git", "config", "--global", "user.password", "GITSECRET66"], ["GITSECRET66"], ["user.password ***"]),
    (["npm", "config", "set", "//registry.npmjs.org/:_authToken", "NPMSECRET67"], ["NPMSECRET67"], []),
    (["app", "//registry.npmjs.org/:_authToken=NPMSECRET68", "--set", "image.tag=1,auth.password=HELMSECRET69"],
     ["NPMSECRET68", "HELMSECRET69"], ["image.tag=1"]),
    (["gh", "secret", "set", "OPENAI_API_KEY", "--body", "GHSECRET70"], ["GHSECRET70"], ["OPENAI_API_KEY"]),
    # quoted headers inside a shell string, the quote kept after the ***
    (["bash", "-c", "curl -H \"Authorization: Bearer QHDRSECRET71\" -H 'Cookie: a=b; sid=QCOOKIESECRET72' "
      "--header=\"X-Api-Key: QHDRSECRET73\" https://h"], ["QHDRSECRET71", "QCOOKIESECRET72", "QHDRSECRET73"],
     ['"Authorization: Bearer ***"', "'Cookie: ***'", "https://h"]),
    (["pwsh", "-c", '$env:HF_TOKEN="PWSHSECRET74"; python a.py'], ["PWSHSECRET74"], ["python a.py"]),
    # pairs under other names: CloudFormation, Service Bus
    (["aws", "cloudformation", "create-stack", "--parameters",
      '[{"ParameterKey": "DbPassword", "ParameterValue": "CFNSECRET75"}, {"ParameterKey": "Env", "ParameterValue": "prod"}]'],
     ["CFNSECRET75"], ['"ParameterKey": "DbPassword"', '"ParameterValue": "prod"']),
    (["app", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=SBSECRET76="],
     ["SBSECRET76"], ["SharedAccessKeyName=Root"]),
    # Java properties, an env-style header, ids whose form is a credential, a DSN's key
    (["java", "-Dspring.datasource.password=JAVASECRET77", "-Djavax.net.ssl.keyStorePassword=JAVASECRET78", "-jar", "a.jar"],
     ["JAVASECRET77", "JAVASECRET78"], ["-jar a.jar"]),
    (["app", "Authorization=Bearer ENVHDRSECRET79", "--port", "8000"], ["ENVHDRSECRET79"],
     ["Authorization=Bearer ***", "--port 8000"]),
    (["env", "AWS_ACCESS_KEY_ID=AKIAZZZZZZZZZZZZZZZZ", "SENTRY_DSN=https://DSNSECRET80@o1.ingest.sentry.io/1", "app"],
     ["AKIAZZZZZZZZZZZZZZZZ", "DSNSECRET80"], ["o1.ingest.sentry.io/1"]),
]


def _forms(argv: list[str]) -> list[str]:
    """A command as gpuscope meets it: the argument list, the same joined into one string (a
    stored command, redacted again when read), and inside `bash -c`."""
    return [redact_command(argv) or "", redact_command(" ".join(argv)) or "",
            redact_command(["bash", "-c", " ".join(argv)]) or ""]


@pytest.mark.parametrize("argv,vanish,remain", ATTACKS, ids=[" ".join(a)[:50] for a, _, _ in ATTACKS])
def test_attack_forms_are_redacted(argv: list[str], vanish: list[str], remain: list[str]) -> None:
    for shown in _forms(argv):
        for secret in vanish:
            assert secret not in shown, (argv, shown)
        assert redact_command(shown) == shown  # idempotent
    for keep in remain:
        assert keep in _forms(argv)[0], (argv, _forms(argv)[0])


# Slots a secret can be planted in (the secret is `{s}`): each must hide it in every form.
SLOTS = [
    "https://h/cb#access_token={s}", "https://h/x?a=1;token={s}", "https://h/x?sig={s}&sv=1",
    "DefaultEndpointsProtocol=https;AccountName=a;AccountKey={s};EndpointSuffix=e",
    "Server=s;Password={s};Database=d", "a=1,password={s},b=2",
    "-u|{s}:", "-u|:{s}", "-uuser:{s}", "--user|user:{s}", "--pass|{s}", "--pw|{s}", "--passcode|{s}",
    "--creds|{s}", "--cred|{s}", "-pass|pass:{s}", "-passin|pass:{s}", "--api-key|-{s}", "--API-KEY|{s}",
    "--secret|{s}", "--client-secret={s}", "--private-key|{s}", "--passphrase|{s}", "--auth|{s}",
    '{{"token": "ab\\"{s}"}}', '{{"password": "{s}"}}', '{{"auth": {{"value": "{s}"}}}}',
    '[{{"name": "api_key", "value": "{s}"}}]', '--cfg={{"a": {{"b": {{"client_secret": "{s}"}}}}}}',
    "-H|Authorization: Bearer {s}", "--header=X-Api-Key: {s}", "PGPASSWORD={s}", "postgres://u:{s}@h/db",
    "https://{s}@h/x", "https://h/?next=https%3A%2F%2Fh%2F%3Ftoken%3D{s}", "--token=@{s}", "HF_TOKEN='{s}'",
]
BENIGN_ARGS = [["--model", "meta-llama/Llama-3.1-8B"], ["--max-tokens", "512"], ["--port", "8000"],
               ["--disable-auth-check"], ["--tokenizer", "hf/tok"], ["--temperature", "-1"], ["-p", "8000"],
               ["--hf-overrides", '{"rope_scaling": {"factor": 4.0}}'], ["https://h/v1?model=m&n=2"],
               ["CUDA_VISIBLE_DEVICES=0,1"], ["--json", '[{"name": "x", "value": 1}]'], ["--bypass-cache"],
               ["--ssl-keyfile", "/k.pem"], ["-u", "1000:1000"]]


@settings(max_examples=250, deadline=None, database=None)
@given(slot=st.sampled_from(SLOTS), tail=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.~+%-]{5,24}", fullmatch=True),
       before=st.lists(st.sampled_from(BENIGN_ARGS), max_size=3), after=st.lists(st.sampled_from(BENIGN_ARGS), max_size=3))
def test_a_secret_in_any_slot_never_survives(slot: str, tail: str, before: list[list[str]],
                                             after: list[list[str]]) -> None:
    secret = "Zq" + tail  # no word around it contains "Zq"
    planted = slot.format(s=secret).split("|")
    head = ["python", "-m", "server"] + [w for ws in before for w in ws]
    argv = head + planted + [w for ws in after for w in ws]
    for shown in _forms(argv) + [redact_command(redact_command(argv))]:
        assert shown is not None and secret not in shown, (argv, shown)
        assert redact_command(shown) == shown, (argv, shown)  # idempotent
    # the arguments around it are kept as written
    out = redact_argv(argv)
    assert out[:len(head)] == head and out[len(head) + len(planted):] == argv[len(head) + len(planted):], (argv, out)


def test_messages_that_quote_the_command_redact_it(tmp_path: Path) -> None:
    """`gpuscope run -- HF_TOKEN=T python3 -c 1` is "command not found", and argparse quotes
    what it did not recognize: neither prints the secret; each is one line, exit 2."""
    db = tmp_path / "s.duckdb"
    for argv, secret in ((["run", "--db", db, "--", "HF_TOKEN=hf_MSGSECRET1abc", "python3", "-c", "1"], "MSGSECRET1"),
                         (["run", "--db", db, "--", "https://u:MSGSECRET2@h/x"], "MSGSECRET2"),
                         (["run", "--db", db, "--", "--api-key=MSGSECRET3"], "MSGSECRET3"),
                         (["runs", "--db", db, "--api-key", "MSGSECRET4"], "MSGSECRET4")):
        r = run_cli(*argv)
        assert r.code == 2 and secret not in r.err + r.out, r.err
        assert len(r.err.strip().splitlines()) == 1, r.err
    assert "env NAME=value" in run_cli("run", "--db", db, "--", "HF_TOKEN=x", "python3").err


_PIECES = ["--api-key", "-p", "-u", "token=", "?", "&", ";", "#", "=", ":", "@", "https://", "u:p@h", "{", "}", "[",
           "]", '"', "'", "\\", " ", "password", "Bearer", "Authorization:", "mysql", "-pX", "sk-", "abc123XYZ", "%3D",
           "%26", "-", "pass:", "env:", "set", "config", ",", "\n", "-----BEGIN PRIVATE KEY-----", "hf_", "1", "null"]


@settings(max_examples=400, deadline=None, database=None)
@given(text=st.lists(st.sampled_from(_PIECES), max_size=20).map("".join))
def test_any_text_is_redacted_once_for_all(text: str) -> None:
    """Whatever a stored command holds (bits of options, URLs, JSON, headers, quotes), redacting
    it never fails, and redacting the result changes nothing: a command read back, redacted
    again by the read layer and the renderer, reads the same; so does an argument list's."""
    once = redact_command(text)
    assert once is not None and redact_command(once) == once, (text, once)
    # (a quote inside one argument means something else once the list is joined into a text)
    words = [w for w in text.split() if "\"" not in w and "'" not in w]
    listed = redact_command(words)
    assert listed is not None and redact_command(listed) == listed, (words, listed)
