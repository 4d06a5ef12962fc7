"""The ``arenaforge`` command line (typer). Each command is a thin wrapper over the Python API."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from arenaforge.pipeline.progress import Col, console, fit_table, stdout_console
from arenaforge.pipeline.sandbox_cli import app as sandbox_app

app = typer.Typer(
    help="arenaforge: mine, battle, verify and emit a code-instruction SFT dataset.\n\n"
         "Start with `arenaforge run` (configs/default.yaml: embedded CPU experts).",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
config_app = typer.Typer(help="Check or print a run config.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(sandbox_app, name="sandbox")

DEFAULT_CONFIG = Path("configs/default.yaml")
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a config field: --set rate.alpha=0.5 (repeatable).")]


def _fail(message: str, code: int = 2) -> None:
    # soft_wrap: a message stays one line (a log or a terminal wraps it, never rich)
    console.print(f"[red]error:[/red] {message}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _load(path: Path, overrides: list[str] | None):
    from arenaforge.pipeline.config import ConfigError, load_config

    try:
        return load_config(path, overrides or [])
    except ConfigError as exc:
        _fail(str(exc))


def _load_checked(path: Path, overrides: list[str] | None):
    """A run config whose stage protocols every configured model can serve (nothing loads)."""
    from arenaforge.pipeline.capability_check import check_protocol_capabilities
    from arenaforge.pipeline.config import ConfigError

    cfg = _load(path, overrides)
    try:
        check_protocol_capabilities(cfg, str(path) + (" (with --set overrides)" if overrides
                                                      else ""))
    except ConfigError as exc:
        _fail(str(exc))
    return cfg


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs.")] = False):
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


@app.command()
def run(config: Annotated[Path, typer.Argument(help="Run config YAML.")] = DEFAULT_CONFIG,
        set_: SetOpt = None,
        name: Annotated[str | None, typer.Option(help="Run name (directory).")] = None,
        run_dir: Annotated[str | None, typer.Option(
            help="Run directory, a path or a URI (s3://bucket/runs/NAME?endpoint_override=...); "
                 "sets artifacts_dir and name.")] = None,
        fresh: Annotated[bool, typer.Option(help="Discard an existing run directory.")] = False,
        runner: Annotated[str | None, typer.Option(help="ray | inline")] = None,
        ray_address: Annotated[str | None, typer.Option(help="Ray cluster address.")] = None,
        quiet: Annotated[bool, typer.Option(help="No progress display.")] = False) -> None:
    """Run the pipeline; a rerun resumes where the last one stopped."""
    from arenaforge.pipeline import run as run_with_report  # the Python API's run, the same run
    from arenaforge.pipeline.run_failures import run_failure
    from arenaforge.pipeline.runner import RunStopped

    overrides = list(set_ or [])
    overrides += [f"name={name}"] if name else []
    if run_dir:
        from arenaforge.pipeline.filesystem import split

        if name:
            _fail("--run-dir names the run already; drop --name")
        try:
            parent, run_name = split(run_dir)
        except ValueError as exc:
            _fail(str(exc))
        overrides += [f"artifacts_dir={parent}", f"name={run_name}"]
    overrides += [f"runner.kind={runner}"] if runner else []
    overrides += [f"runner.ray_address={ray_address}"] if ray_address else []
    cfg = _load_checked(config, overrides)
    try:
        result = run_with_report(cfg, fresh=fresh, show_progress=not quiet)
    except RunStopped as stop:  # SIGINT or SIGTERM: Ray is down, the committed shards kept
        console.print(stop.describe(), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None
    except Exception as exc:
        failure = run_failure(exc)
        if failure is None:
            raise
        _fail(*failure)
    from arenaforge.pipeline.filesystem import display

    console.print(f"run directory: {display(result.run_dir)}")


@config_app.command("validate")
def config_validate(file: Path, set_: SetOpt = None,
                    render: Annotated[bool, typer.Option(
                        "--render", help="Also render every model's chat template with every "
                        "conversation its stages send (no weights loaded).")] = False) -> None:
    """Validate a config: fields, model ids, and that each model can serve its stage's
    protocol (exit 2 naming the field, or the model, stage and protocol, on error); with
    --render, that each model's chat template renders what its stages send (exit 2 naming the
    model, stage and template error)."""
    cfg = _load_checked(file, set_)
    for warning in cfg.role_warnings():
        console.print(f"warning: {warning}", highlight=False, markup=False)
    if render:
        from arenaforge.pipeline.template_check import render_config

        models, problems = render_config(cfg)
        for m in models:
            folded = ", system folded into the first user turn" if m.fold_system else ""
            shapes = "; ".join(f"{stage}: {len(names)}" for stage, names in m.shapes.items())
            console.print(f"  {m.model}: template from {m.source}{folded}; rendered {shapes}",
                          highlight=False, markup=False)
        if problems:
            _fail(f"{file}: {len(problems)} conversation(s) do not render:\n"
                  + "\n".join(f"  {p}" for p in problems))
    console.print(f"{file}: ok (config hash {cfg.config_hash()})")


@config_app.command("plan")
def config_plan(file: Path, set_: SetOpt = None,
                gpus: Annotated[int, typer.Option(help="GPUs of the cluster.")] = 1,
                gpu_memory_gb: Annotated[float, typer.Option(
                    help="Memory of one GPU in GB.")] = 80.0,
                json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
                ) -> None:
    """Place the config's vLLM engines on GPUs: per engine its GPUs, tensor-parallel size,
    weights and KV cache, then whether each stage's engines fit (exit 2 naming the stage and
    the engine when they cannot)."""
    import json

    from arenaforge.pipeline.placement import plan_run

    cfg = _load(file, set_)
    plan = plan_run(cfg, gpus, gpu_memory_gb)
    if json_:
        typer.echo(json.dumps(plan.to_dict(), indent=2))
    else:
        out = stdout_console()
        for e in plan.engines:
            out.print(f"{e.model}: gpus {e.gpus:g} (tensor_parallel_size "
                      f"{e.tensor_parallel_size}, {e.replicas} replica(s)), weights "
                      f"{e.weights_gib:.2f} GiB, kv_cache {e.kv_cache_gib:.2f} GiB "
                      f"({e.concurrency} x {e.context_length} tokens), "
                      f"{e.memory_per_gpu_gib:.2f} GiB per GPU, gpu_memory_utilization "
                      f"{e.gpu_memory_utilization:g}", highlight=False, markup=False)
        for s in plan.stages:
            out.print(f"stage {s.stage}: {', '.join(s.engines) or '-'}: {s.gpus:g} GPU(s), "
                      f"{'fits' if s.fits else 'does not fit'}", highlight=False, markup=False)
        out.print(f"fits: {str(plan.fits).lower()}", highlight=False)
    if not plan.fits:
        _fail(f"{file}: {plan.first_problem()}")


@config_app.command("show")
def config_show(file: Path, set_: SetOpt = None) -> None:
    """Print the resolved config, defaults included."""
    from arenaforge.pipeline.config import dump_config

    typer.echo(dump_config(_load(file, set_)))


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON to stdout instead of tables.")]


@app.command()
def inspect(run_dir: Annotated[str, typer.Argument(help="Run directory: a path or a URI.")],
            stage: Annotated[str | None, typer.Argument()] = None,
            rows: Annotated[int, typer.Option(help="Sample rows to show.")] = 3,
            json_: JsonOpt = False) -> None:
    """Show a run's funnel and leaderboard, or one stage's schema, counts and sample rows."""
    from arenaforge.pipeline.apps.inspect import inspect_run

    try:
        inspect_run(run_dir, stage, rows, as_json=json_)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        _fail(str(exc))


@app.command()
def graph(config: Annotated[Path, typer.Argument(help="Run config YAML.")] = DEFAULT_CONFIG,
          set_: SetOpt = None, json_: JsonOpt = False) -> None:
    """Print the stage graph of a config: what each stage reads, from whom, and its outputs.

    The runner's pre-flight check runs first (exit 2 naming stage and column when a declared
    read cannot be satisfied), so a graph that prints is one that can run.
    """
    import json

    from arenaforge.pipeline.runner import ContractChainError, check_chain
    from arenaforge.pipeline.stage_graph import graph_lines, stage_graph
    from arenaforge.stages import get_stage

    cfg = _load(config, set_)
    specs = [get_stage(name) for name in cfg.stages]
    try:
        check_chain(specs)
    except ContractChainError as exc:
        _fail(str(exc))
    nodes = stage_graph(specs)
    typer.echo(json.dumps(nodes, indent=2) if json_ else "\n".join(graph_lines(nodes)))


# `arenaforge models` columns (describe_models' keys): ids and numbers whole, paths fold; a
# narrow terminal drops sha256 first and keeps id and path.
DEFAULT_REGISTRY = Path("configs/models.yaml")
_MODEL_COLUMNS = (Col("id", whole=True), Col("role", True, 6), Col("backend", True, 5),
                  Col("family", True, 2), Col("source", False, 3), Col("installed", True, 4),
                  Col("path"), Col("size_bytes", True, 8, "right"), Col("checksum", False, 9),
                  Col("sha256", False, 1), Col("install", False, 7))


@app.command()
def models(registry: Annotated[Path, typer.Option(help="Model registry.")] = DEFAULT_REGISTRY,
           json_: JsonOpt = False) -> None:
    """List registered models: size, path and checksum status."""
    import json

    from arenaforge.pipeline.models import describe_models, load_registry

    try:
        rows = describe_models(load_registry(registry))
    except ValueError as exc:
        _fail(str(exc))
    if json_:
        typer.echo(json.dumps(rows, indent=2))
        return
    cells = [["-" if row[c.header] is None else str(row[c.header]) for c in _MODEL_COLUMNS]
             for row in rows]
    out = stdout_console()
    out.print(fit_table(_MODEL_COLUMNS, cells, out.width, title=str(registry)))


@app.command()
def report(run_dir: Annotated[str, typer.Argument(help="Run directory: a path or a URI.")]
           ) -> None:
    """(Re)build audit/report.html for a run directory."""
    from arenaforge.pipeline.apps.report import build_report

    path = build_report(run_dir)
    console.print(f"report: {path}")


@app.command()
def audit(table: Path, out: Annotated[Path, typer.Option(help="Output directory.")] = Path("audit")) -> None:
    """Audit judges against execution on your own table (see stages/output/audit.py for the schema)."""
    from arenaforge.pipeline.apps.report import audit_file

    path = audit_file(table, out)
    console.print(f"audit written to {path}")


@app.command()
def train(config: Path, set_: SetOpt = None,
          dataset: Annotated[list[str] | None, typer.Option(
              "--dataset", help="A run directory or emitted dataset to train on (repeatable; "
              "replaces the config's datasets).")] = None) -> None:
    """Supervised fine-tuning with TRL on emitted datasets (configs/sft-tiny.yaml;
    configs/sft-base.yaml: a base coder on a run's dataset)."""
    from arenaforge.pipeline.apps.training import train_main

    out = train_main(config, list(set_ or []), list(dataset or []) or None)
    console.print(f"model saved to {out}")


@app.command("eval")
def eval_(model: str,
          suite: Annotated[str, typer.Option(help="Benchmark suite.")] = "humaneval",
          limit: Annotated[int | None, typer.Option(help="First N problems.")] = None,
          n_samples: Annotated[int, typer.Option(help="Samples per problem (pass@k).")] = 1,
          language: Annotated[list[str] | None, typer.Option(
              "--language", help="A language to evaluate in (repeatable; `all` for the eight): "
              "python is HumanEval itself, the others its translation.")] = None) -> None:
    """pass@k of a model directory, a registered model id or `canonical` through the sandbox."""
    import json

    from arenaforge.pipeline.apps.evaluate import evaluate
    from arenaforge.pipeline.apps.evaluate_languages import check_model_languages

    try:
        languages = check_model_languages(model, language or ["python"])
    except ValueError as exc:
        _fail(str(exc))
    result = evaluate(model, suite=suite, limit=limit, n_samples=n_samples, languages=languages)
    typer.echo(json.dumps(result, indent=2, default=str))


@app.command()
def ablate(run_dir: Path, set_: SetOpt = None,
           config: Annotated[Path | None, typer.Option(
               help="Ablation config YAML (default: configs/ablate-tiny.yaml).")] = None) -> None:
    """Emit, train and evaluate one dataset per selection rule from a run's battles."""
    from arenaforge.pipeline.apps.ablate import ablate_main

    table = ablate_main(run_dir, list(set_ or []), config)
    console.print(table)


@app.command("judge-bench")
def judge_bench(
        config: Annotated[Path, typer.Argument(help="judge-bench config YAML.")] = Path(
            "configs/judge-bench.yaml"),
        problems: Annotated[int | None, typer.Option(help="First N problems.")] = None,
        out: Annotated[Path, typer.Option(help="Output directory (resumable).")] = Path(
            "artifacts/judge_bench")) -> None:
    """Judge card: execution-labelled answer pairs judged by each judge and protocol."""
    from arenaforge.pipeline.apps.judge_bench.bench import bench_main

    try:
        bench_main(config, problems, out)
    except ValueError as exc:
        _fail(str(exc))


@app.command("verify-bench")
def verify_bench(
        config: Annotated[Path, typer.Argument(help="Run config YAML.")] = DEFAULT_CONFIG,
        problems: Annotated[int | None, typer.Option(
            help="N problems (per language): a fixed seeded sample; default all.")] = None,
        out: Annotated[Path, typer.Option(help="Output directory (resumable).")] = Path(
            "artifacts/verify_bench"),
        language: Annotated[list[str] | None, typer.Option(
            "--language", help="HumanEval in this language (repeatable; `all` for the eight): "
            "python is HumanEval itself, the others its translation.")] = None,
        problems_file: Annotated[Path | None, typer.Option(
            help="Your problems instead of HumanEval: JSONL with prompt, tests (hidden), "
            "entry_point, language, optional task_id, task_kind, instruction, signature.")
        ] = None,
        set_: SetOpt = None,
        seed: Annotated[int, typer.Option(help="Seed of the problem sample.")] = 0,
        fresh: Annotated[bool, typer.Option(help="Discard an existing run directory.")] = False,
        quiet: Annotated[bool, typer.Option(help="No progress display.")] = False) -> None:
    """Verification card: the config's own roles on problems with hidden tests the run never
    sees (decontamination and compression bypassed); every answer, judges' winner and emitted
    row run on them: verified_precision, yield_of_solvable, judge_winner_precision,
    lost_by_admission, per language (OUT/card.md, OUT/card.json)."""
    from arenaforge.pipeline.apps.verify_bench.bench import BenchError, bench_main

    try:
        bench_main(config, problems, out, language, problems_file, list(set_ or []), seed,
                   fresh, quiet)
    except BenchError as exc:
        _fail(str(exc), exc.code)


def main() -> None:
    from arenaforge.pipeline.config import ConfigError

    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except ConfigError as exc:  # train / eval / ablate configs: same contract as `run`
        console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
