"""Secrets in command lines: what is hidden and what is kept (gpuscope.redact), and a run with
planted secrets whose store, `runs --json` and `sql` output never contain them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
     "curl -H Authorization: *** http://localhost:8000/v1/models"),
    (["bash", "-c", "python serve.py --api-key inner-secret --model m && echo done"],
     "bash -c python serve.py --api-key *** --model m && echo done"),
    (["sh", "-c", "HF_TOKEN=hf_inline vllm serve m --port 8000"], "sh -c HF_TOKEN=*** vllm serve m --port 8000"),
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
                 "--access_token", "DB_PASSWORD", "--pwd", "cookie"):
        assert is_secret_name(name), name
    for name in ("--max-tokens", "--tokenizer", "--keys", "--key-value-heads", "--ssl-keyfile", "--disable-auth",
                 "--num-tokens", "--monkey", "--authors", "PATH", "CUDA_VISIBLE_DEVICES", "--hf-token-path"):
        assert not is_secret_name(name), name


def test_option_value_starting_with_dash_is_not_eaten() -> None:
    assert redact_argv(["x", "--api-key", "--model", "m"]) == ["x", "--api-key", "--model", "m"]


def test_environment_names_only() -> None:
    assert redact_environment(["PATH", "HF_TOKEN", "CUDA_VISIBLE_DEVICES", "OPENAI_API_KEY"]) == [
        "CUDA_VISIBLE_DEVICES", "PATH"]


SECRETS = ("SECRETK_0001", "SECRETT_0002", "SECRETP_0003", "SECRETENV_0004")


def test_run_with_planted_secrets_stores_none(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    env_secret = SECRETS[3]
    cmd = [sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--no-analyze", "--",
           sys.executable, "-c", "import sys; print(len(sys.argv))",
           "--api-key", SECRETS[0], f"--token={SECRETS[1]}", "--url", f"https://user:{SECRETS[2]}@host/x"]
    import os

    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HF_TOKEN": env_secret, "GPUSCOPE_DB": str(db)})
    assert p.returncode == 0, p.stderr
    shown = p.stdout + p.stderr
    runs = run_cli("runs", "--db", db, "--json")
    assert runs.code == 0
    (run,) = runs.json()
    assert "--api-key ***" in run["command"] and "--token=***" in run["command"]
    sql = run_cli("sql", "--db", db, "SELECT * FROM runs", "--json")
    text = run_cli("runs", "--db", db)
    everything = [shown, runs.out, sql.out, text.out, db.read_bytes().decode("latin-1")]
    run_dirs = list((tmp_path / "gpuscope-runs").rglob("*"))
    everything += [str(p) for p in run_dirs]
    everything += [p.read_bytes().decode("latin-1") for p in run_dirs if p.is_file()]
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
