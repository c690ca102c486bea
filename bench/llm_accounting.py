"""What an LLM run costs, counted twice: by the OpenAI-compatible server that answered and by kforge.

The real graph, the real HTTP client and the real sandbox on the CPU twin of a problem; the model is a scripted
server on 127.0.0.1 (``tests.fake_openai_server``) that counts tokens as OpenAI-compatible servers without a
tokenizer do (a quarter of the characters). ``--rounds`` rounds of ``--ideas`` ideas, every coder branch answering
with the same correct candidate, so the branches run at once. Prints, per role: the calls and tokens the server
billed, those kforge recorded in the run's state, and the prompts' sizes.

    python bench/llm_accounting.py --rounds 2 --ideas 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langgraph.checkpoint.memory import InMemorySaver

from agents.base import RoleContext
from agents.llm import ChatSession
from agents.models import make_chat_model, parse_model
from graphs.builder import build_graph
from graphs.config import RunConfig
from sandbox.local import LocalSandbox
from tests.fake_openai_server import FakeOpenAIServer
from tools.problem import load_problem
from tools.protocol import TimingConfig

ROOT = Path(__file__).resolve().parents[1]
CANDIDATE = ROOT / "problems" / "candidates" / "softmax_cpu.py"
# The first line of each role's request, as the prompt templates (agents/prompts) write it.
TASKS = {"## Task: plan": "planner", "## Task: write": "coder", "## Task: repair": "coder", "## Task: review": "critic"}


def _ideas(k: int) -> str:
    ideas = [{"text": f"idea {i}: one C loop per row", "expected_gain": "2x", "parent_id": None} for i in range(k)]
    return f"```json\n{json.dumps(ideas)}\n```"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ideas", type=int, default=3)
    args = parser.parse_args()
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"
    good = f"Here it is.\n\n```python\n{CANDIDATE.read_text()}```\n"
    review = '```json\n{"feedback": "keep going", "stop": false, "reasons": {}}\n```'
    config = RunConfig(
        problem=str(ROOT / "problems" / "softmax_small.py"),
        device="cpu",
        model="openai:test-model",
        ideas=args.ideas,
        rounds=args.rounds,
        patience=args.rounds,
        timing=TimingConfig(min_trials=20, min_seconds=0.1, warmup_trials=2),
        compile_reference=False,
    )
    with FakeOpenAIServer(models=("test-model",)) as server, tempfile.TemporaryDirectory() as run_dir:
        for _ in range(args.rounds):
            server.reply(_ideas(args.ideas))
            for _ in range(args.ideas):
                server.reply(good)
            server.reply(review)
        chat = ChatSession(make_chat_model(parse_model(config.model, base_url=server.url), timeout_s=60), price=None)
        ctx = RoleContext(
            load_problem(config.problem),
            LocalSandbox(),
            config,
            Path(run_dir),
            {"available_bytes": 8 << 30, "chat": chat},
        )
        graph = build_graph(ctx).compile(checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "t"}, "recursion_limit": config.recursion_limit}
        graph.invoke({"run_id": "t", "started_at": time.time()}, cfg)
        state = graph.get_state(cfg).values
        billed = list(server.usage)
    print(f"{args.rounds} rounds x {args.ideas} ideas, {len(billed)} requests answered\n")
    print(
        "| role | calls: server | calls: kforge | input tokens: server | kforge | output tokens: server | kforge "
        "| prompt chars: median | max |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for role in ("planner", "coder", "critic"):
        mine = [u for u in billed if TASKS.get(" ".join(u["request"].split()[:3])) == role]
        kept = state["usage"].get(role, {})
        sizes = [r.prompt_chars for r in chat.calls if r.role == role] or [0]
        print(
            f"| {role} | {len(mine)} | {kept.get('llm_calls', 0)} | {sum(u['prompt_tokens'] for u in mine)} "
            f"| {kept.get('input_tokens', 0)} | {sum(u['completion_tokens'] for u in mine)} "
            f"| {kept.get('output_tokens', 0)} | {statistics.median(sizes):.0f} | {max(sizes)} |"
        )


if __name__ == "__main__":
    main()
