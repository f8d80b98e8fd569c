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
