"""Time builtin template points on the research problems through the real harness, side by side with PyTorch.

    python bench/kernel_variants.py --out DIR [--only softmax,layernorm,matmul] [--policy relaxed]

Each point is rendered by the catalog exactly as the builtin coder renders it and evaluated as one EvalJob in
the local sandbox: correctness on fresh seeds, then the candidate timed interleaved with eager and
torch.compile in the same process (L2 flushed before every call, fresh input values every trial). Writes
DIR/kernel_variants.json (every JobResult) and DIR/kernel_variants.md (a table per problem).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.builtin.catalog import describe, render  # noqa: E402
from sandbox.local import LocalSandbox  # noqa: E402
from tools.protocol import EvalJob  # noqa: E402

COPY_BYTES_PER_S = 4.28e12  # DESIGN.md's H200 copy ceiling (read + write)

# Problem -> (bytes of the one-read-one-write floor, [(template, params), ...]).
VARIANTS: dict[str, tuple[int, list[tuple[str, dict]]]] = {
    "softmax_4096x65536": (
        2 * 4096 * 65536 * 4,
        [
            ("softmax_cuda_cluster", {"cluster": 8, "block": 128, "items": 16}),
            ("softmax_cuda_cluster", {"cluster": 4, "block": 256, "items": 16}),
            ("softmax_cuda_cluster", {"cluster": 8, "block": 128, "items": 16, "stream": True}),
            ("softmax_cuda_block", {"block": 1024, "items": 0}),
        ],
    ),
    "layernorm_16x64x256x256": (
        (2 * 16 + 2) * 64 * 256 * 256 * 4,
        [
            ("layernorm_cuda_persistent", {"block": 512, "per_sm": 1, "items": 16, "unroll": 4, "stage": 8}),
            ("layernorm_cuda_persistent", {"block": 512, "per_sm": 1, "items": 16, "unroll": 4, "stage": 0}),
            ("layernorm_cuda_wide", {"block": 512, "split": 32, "unroll": 2, "rows_per_block": 16}),
            ("layernorm_cuda_split", {"block": 256, "split": 64}),
        ],
    ),
    "matmul_4096": (
        0,
        [
            ("matmul_cuda_mma", {"split": 3, "warp": "64x64", "promote": False, "bk": 16}),
            ("matmul_cuda_mma", {"split": 3, "warp": "64x32", "promote": True}),
            ("matmul_cuda_mma", {"split": 1, "warp": "64x64"}),
            ("matmul_cuda_tiled", {"bm": 128, "bn": 128, "bk": 8, "tm": 8, "tn": 8}),
            ("matmul_cuda_simt", {"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2}),
            ("matmul_cuda_simt", {"bm": 128, "bn": 128, "tm": 8, "tn": 8, "min_blocks": 2, "order": "serpentine"}),
            ("matmul_cuda_simt", {"bm": 256, "bn": 128, "tm": 16, "tn": 8, "min_blocks": 1}),
            ("matmul_cuda_simt", {"bm": 128, "bn": 256, "tm": 8, "tn": 16, "min_blocks": 1}),
            ("matmul_cuda_simt", {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "min_blocks": 1}),
            ("matmul_cuda_simt", {"bm": 128, "bn": 128, "tm": 16, "tn": 8, "min_blocks": 1, "early": True}),
        ],
    ),
}


def evaluate(sandbox: LocalSandbox, problem: str, template: str, params: dict, policy: str) -> dict:
    source = render(template, params, "cuda")
    result = sandbox.run(
        EvalJob(
            problem_name=f"{problem}.py",
            problem_source=(ROOT / "problems" / f"{problem}.py").read_text(),
            candidate_name=f"{template}.py",
            candidate_source=source,
            device="cuda",
            policy=policy,  # type: ignore[arg-type]
        )
    )
    return json.loads(result.model_dump_json())


def row(problem: str, floor_bytes: int, template: str, params: dict, res: dict) -> str:
    stats = (res.get("timing") or {}).get("stats", {})
    cand, eager, comp = (stats.get(k, {}).get("median_ms") for k in ("candidate", "eager", "compile"))
    what = f"`{template}` {json.dumps(params, sort_keys=True)}"
    if res["status"] != "ok" or not (cand and eager and comp):
        return f"| {what} | {res['status']}: {res['reason'][:80]} | | | | |"
    floor = f"{floor_bytes / COPY_BYTES_PER_S * 1e3 / cand * 100:.1f}%" if floor_bytes else "n/a"
    err = max((c.get("max_abs_error") or 0.0) for c in res["correctness"]["checks"])
    return (
        f"| {what} | {cand:.4f} ms | {eager / cand:.2f}× | {comp / cand:.2f}× | {floor} | {err:.2e} |"
        f"  <!-- eager {eager:.4f} ms, compile {comp:.4f} ms -->"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated problem name prefixes")
    parser.add_argument("--policy", default="relaxed", choices=["relaxed", "strict"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = [p for p in args.only.split(",") if p]
    sandbox = LocalSandbox()
    results: list[dict] = []
    lines = ["| point | candidate | vs eager | vs compile | % copy floor | max abs err |", "|---|---|---|---|---|---|"]
    try:
        for problem, (floor_bytes, points) in VARIANTS.items():
            if only and not any(problem.startswith(o) for o in only):
                continue
            lines.append(f"| **{problem}** | | | | | |")
            for template, params in points:
                res = evaluate(sandbox, problem, template, params, args.policy)
                results.append({"problem": problem, "template": template, "params": params, "result": res})
                lines.append(row(problem, floor_bytes, template, params, res))
                print(lines[-1], f"  ({describe(template, params)[:80]})", flush=True)
    finally:
        sandbox.close()
    (args.out / "kernel_variants.json").write_text(json.dumps(results, indent=1))
    (args.out / "kernel_variants.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
