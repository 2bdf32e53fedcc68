"""Text and Markdown renderings of :func:`benchmarks.bench.run_benchmark`'s figures, the sweep
plot, and a short reading of the numbers generated from them."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from benchmarks.grid_cost import not_measured_lines, section_lines, total_line
from benchmarks.ratios import (
    TIER_NOT_RUN,
    TIME_RATIOS,
    VIEWS,
    ratio_key,
    view_of,
    why_not_measured,
)

#: The sweep plot's file name inside the report folder.
SWEEP_PLOT = "sweep.png"


def _num(value: Any, fmt: str = ".3g") -> str:
    return "n/a" if value is None else format(value, fmt)


def tier_memory_mb(v: dict[str, Any]) -> float | None:
    """A tier's own memory (MiB): the larger rise of the process's peak RSS during its
    warm-up or its timed steps (see :func:`benchmarks.memory.memory_method`)."""
    rises = [x for x in (v.get("warmup_peak_increase_mb"), v.get("peak_increase_mb"))
             if x is not None and not math.isnan(x)]
    return max(rises) if rises else None


def table_rows(case: dict[str, Any]) -> list[list[str]]:
    """One row per tier: name, s/step, s/epoch, examples/s, the tier's memory (the larger
    rise), the rise during warm-up, the rise during the timed steps, note."""
    rows = []
    for name, v in case["variants"].items():
        if "skipped" in v:
            rows.append([name, "-", "-", "-", "-", "-", "-", v["skipped"]])
            continue
        rows.append([name, _num(v["seconds_per_step"], ".4f"),
                     _num(v["seconds_per_epoch"], ".1f"),
                     _num(v["examples_per_second"], ".0f"), _num(tier_memory_mb(v), ".0f"),
                     _num(v.get("warmup_peak_increase_mb"), ".0f"),
                     _num(v.get("peak_increase_mb"), ".0f"),
                     f"{v['steps_timed']} steps timed, round spread "
                     f"{100 * v['round_spread']:.0f}%" + routes_note(v) + compile_note(v)])
    return rows


def routes_note(v: dict[str, Any]) -> str:
    """How long the tier's fast engine took to settle its routes (empty: not a fast tier)."""
    choice = v.get("routes_chosen_by")
    if not choice:
        return ""
    return (f"; routes settled at warm-up in {choice['warmup_seconds']:.2f} s (timing "
            f"{choice.get('timing_seconds', 0.0):.2f} s)")


def compile_note(v: dict[str, Any]) -> str:
    """What trying the tier compiled gave (empty: not tried)."""
    c = v.get("compile")
    if not c:
        return ""
    if c.get("failed"):
        return f"; compiled: failed ({c['failed'][:120]})"
    if c.get("given_up"):
        return f"; {c['given_up']}"
    return (f"; compiled ({c['tried'].split(',')[0]}): {'kept' if c['kept'] else 'not kept'}, "
            f"{c['compiled_s_per_step']:.4f} vs {c['uncompiled_s_per_step']:.4f} s/step "
            f"uncompiled, compiling took {c['compile_seconds']:.0f} s")


def _spread(case: dict[str, Any], key: str) -> str:
    spread = case.get("ratio_spreads", {}).get(key)
    return "n/a" if spread is None else f"{100 * spread:.0f}%"


def ratio_rows(case: dict[str, Any]) -> list[list[str]]:
    """One row per ratio: name, wall-clock value, its round spread, process-CPU value, its
    view (as users run it / at its best, :data:`benchmarks.ratios.VIEWS`)."""
    return [[ratio_key(a, b), _num(case["ratios"].get(ratio_key(a, b)), ".2f"),
             _spread(case, ratio_key(a, b)),
             _num(case.get("cpu_ratios", {}).get(ratio_key(a, b)), ".2f"),
             view_of(ratio_key(a, b))]
            for a, b in TIME_RATIOS]


#: The per-layer table's views (:data:`benchmarks.layer_costs.LAYER_TABLES` keys) and labels.
LAYER_VIEWS = {"tf": "tf (NHWC)", "torch_cl": "torch (channels-last)"}
#: Which per-layer views explain a ratio's numerator (the DP tier of that framework).
_LAYER_VIEW_OF_TIER = {"tf_dp_fast": "tf", "torch_dp_fast_cl": "torch_cl"}


#: The per-layer table's columns (Markdown header).
LAYER_HEADER = ["view", "layer", "type", "T", "p", "d", "route (default)", "routes timed ms",
                "norm ms", "sum ms", "plain ms", "extra ms", "model extra ms",
                "measured / model", "bound (plain / DP)"]


def _routes_timed(row: dict[str, Any]) -> str:
    timed = row.get("routes_ms") or {}
    return " / ".join(f"{r} {ms:.2f}" for r, ms in timed.items()) or "-"


def layer_rows(case: dict[str, Any]) -> list[list[str]]:
    """The per-layer table of a case (:mod:`benchmarks.layer_costs`), columns
    :data:`LAYER_HEADER`: the route taken (its rule's default in brackets where they differ),
    every timed route's ms, the chosen route's norm / sum ms, the plain weight gradient's,
    the extra, the cost model's extra (roofline), measured / modelled of the route, and
    which side of the roofline bounds the plain weight gradient and the route."""
    rows = []
    for key, table in case.get("layers", {}).items():
        label = LAYER_VIEWS.get(key, key)
        if isinstance(table, dict):
            rows.append([label, "-", "-", "-", "-", "-", table.get("skipped", "not run"),
                         *["-"] * (len(LAYER_HEADER) - 7)])
            continue
        for r in table:
            model = r.get("model", {})
            route = r["route"] + ("" if r.get("default_route") in (None, r["route"])
                                  else f" ({r['default_route']})")
            extra = (model["route_ms"] - (model["plain_ms"] if r["plain_ms"] is not None
                                          else 0.0)) if "route_ms" in model else None
            bound = (f"{model['plain_bound']} / {model['route_bound']}"
                     if "route_bound" in model else "-")
            rows.append([label, r["layer"], r["type"], *(str(r[k]) if r[k] is not None
                                                         else "-" for k in ("T", "p", "d")),
                         route, _routes_timed(r), _num(r["norm_ms"], ".2f"),
                         _num(r["sum_ms"], ".2f"), _num(r["plain_ms"], ".2f"),
                         _num(r["extra_ms"], ".2f"), _num(extra, ".2f"),
                         _num(r.get("measured_over_model"), ".1f"), bound])
    return rows


def modelled_ratio(case: dict[str, Any], view: str) -> float | None:
    """The cost model's DP / plain of a case's trainable layers in one view: the sum of the
    layers' modelled DP-step shares (forward, input gradient, route) over that of their
    plain-step shares (forward, input and weight gradient); None without a roofline."""
    table = case.get("layers", {}).get(view)
    if not isinstance(table, list) or not table:
        return None
    models = [r.get("model", {}) for r in table]
    if any("dp_step_ms" not in m for m in models):
        return None
    plain = sum(m["plain_step_ms"] for m in models)
    return sum(m["dp_step_ms"] for m in models) / plain if plain else None


def costliest_layer(case: dict[str, Any], view: str) -> dict[str, Any] | None:
    """The layer of ``view`` whose DP extra (norm + sum - plain) is largest, or None."""
    table = case.get("layers", {}).get(view)
    if not isinstance(table, list) or not table:
        return None
    return max(table, key=lambda r: r["extra_ms"])


def miss_explanation(results: dict[str, Any], row: dict[str, Any]) -> str:
    """For a missed time target: by how much, and the layer whose DP extra is largest in the
    per-layer table of each DP tier of its ratio (empty when there is no table)."""
    case = results.get("cases", {}).get(row["case"])
    if case is None or row["value"] is None:
        return ""
    key = row["target"].split(" ")[0]
    parts = []
    for tier in key.split("/"):
        view = _LAYER_VIEW_OF_TIER.get(tier)
        top = costliest_layer(case, view) if view else None
        if top is not None:
            model = top.get("model", {})
            why = ""
            if "route_ms" in model:
                why = (f"; modelled +{model['route_ms'] - model.get('plain_ms', 0.0):.1f} ms "
                       f"({model['route_bound']}-bound), measured / modelled "
                       f"{top.get('measured_over_model', float('nan')):.1f}")
            modelled = modelled_ratio(case, view)
            parts.append(f"{LAYER_VIEWS[view]}: {top['layer']} ({top['type']}, "
                         f"{top['route']}, +{top['extra_ms']:.1f} ms per chunk over its "
                         f"plain weight gradient{why})"
                         + (f", modelled DP / plain of the layers {modelled:.2f}"
                            if modelled is not None else ""))
    return ("; largest per-layer DP cost: " + "; ".join(parts)) if parts else ""


def settings_line(results: dict[str, Any]) -> str:
    """The tiers' memory formats, engines and threads (the header's line)."""
    s, m = results["settings"], results["machine"]
    parts = [f"{k}: {v}" for k, v in s.get("memory_format", {}).items()]
    engines = [f"{k}: {v}" for k, v in s.get("engine", {}).items()]
    tf_threads = m.get("tf_threads") or {}
    threads = (f"torch {m['torch_threads']} intra-op threads; TF intra-op "
               f"{tf_threads.get('intra_op', 'n/a')}, inter-op {tf_threads.get('inter_op', 'n/a')}"
               " (0: TF's default, one per core)")
    return ("Memory formats: " + "; ".join(parts or ["not recorded"]) + ". Engines: "
            + "; ".join(engines or ["not recorded"]) + f". Threads: {threads}.")


def roofline_line(roofline: dict[str, Any]) -> str:
    """This CPU's measured peak FLOP/s and bandwidth, and how they were measured."""
    return (f"{roofline['peak_flops'] / 1e9:.0f} GFLOP/s peak, "
            f"{roofline['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s memory bandwidth "
            f"({roofline['method']})")


def target_lines(results: dict[str, Any]) -> list[str]:
    """Each measured target with its value and verdict; then one sentence for those this run
    could not measure, grouped by why (a quick or partial run lacks their cases)."""
    rows = results.get("targets", [])
    out = [f"{row['case']}: {row['target']}: {_num(row['value'], '.2f')}"
           + _target_spread(results, row) + f" -> {row['verdict'].upper()}"
           + (miss_explanation(results, row) if row["verdict"] == "missed" else "")
           for row in rows if row["value"] is not None]
    unmeasured = [row for row in rows if row["value"] is None]
    if unmeasured:
        out.append(not_measured_sentence(results, unmeasured))
    return out


def _target_spread(results: dict[str, Any], row: dict[str, Any]) -> str:
    """`` (round spread x%)`` of a wall-clock time target's ratio (empty for the others)."""
    case = results.get("cases", {}).get(row["case"])
    if case is None or "(time)" not in row["target"]:
        return ""
    spread = case.get("ratio_spreads", {}).get(row["target"].split(" ")[0])
    return "" if spread is None else f" (round spread {100 * spread:.0f}%)"


def not_measured_sentence(results: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """One sentence: how many targets this run did not measure, which, and why."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        why = row.get("why") or why_not_measured(row["case"], results)
        if row["case"] not in groups.setdefault(why, []):
            groups[why].append(row["case"])
    reasons = "; ".join(f"{', '.join(cases)}: {why.replace('its case', 'the case')}"
                        for why, cases in groups.items())
    ran = ", ".join(results.get("cases", {})) or "no case"
    sweep = results.get("sweep")
    swept = (f" and swept batch {', '.join(map(str, sweep['batches']))}" if sweep else "")
    scope = (f"This {'quick ' if results.get('quick') else ''}run timed {ran}{swept}; "
             f"{len(rows)} of the {len(results.get('targets', []))} targets are not measured "
             f"({reasons})")
    not_run = any(why != TIER_NOT_RUN for why in groups)
    return scope + ("; the full `dpcompare bench` runs every case and the whole sweep."
                    if not_run else ".")


def reading(results: dict[str, Any]) -> list[str]:
    """A short written reading generated from the numbers (sentences, one per finding)."""
    out = []
    for name, case in results["cases"].items():
        r, v = case["ratios"], case["variants"]
        parts = []
        for fw, plain in (("tf", "tf_plain"), ("torch", "torch_plain")):
            fast = r.get(ratio_key(f"{fw}_dp_fast", plain))
            ref = r.get(ratio_key(f"{fw}_dp_reference", plain))
            if fast is not None:
                text = f"{fw} fast DP costs {fast:.2f}x its plain step"
                if ref is not None:
                    text += f" (reference {ref:.2f}x, so fast is {ref / fast:.1f}x quicker)"
                parts.append(text)
        same = r.get("tf_dp_fast/torch_dp_fast")
        if same is not None:
            faster = "TF" if same < 1 else "torch"
            parts.append(f"on the same algorithm {faster} is {max(same, 1 / same):.2f}x "
                         "faster")
            plain = r.get("tf_plain/torch_plain")
            if plain is not None:
                share = math.log(plain) / math.log(same) if abs(math.log(same)) > 0.05 else None
                parts.append(f"the plain steps already differ by tf_plain/torch_plain = "
                             f"{plain:.2f}"
                             + (" (most of the gap is the frameworks' own step, not the DP "
                                "engines)" if share is not None and share > 0.5 else ""))
        for view, keys in VIEWS.items():
            shown = [f"{k} {r[k]:.2f}" for k in keys if r.get(k) is not None]
            if shown:
                parts.append(f"{view}: " + ", ".join(shown))
        stock = r.get("tf_privacy_stock/opacus_stock")
        if stock is not None:
            faster = "TF Privacy" if stock < 1 else "Opacus"
            parts.append(f"out of the box {faster} is {max(stock, 1 / stock):.2f}x faster")
        skipped = [n for n, f in v.items()
                   if "skipped" in f and f["skipped"] != "not in this case"]
        if skipped:
            parts.append("not run: " + ", ".join(skipped) + " (see the table)")
        epoch = [f"{n} {f['seconds_per_epoch']:.0f} s" for n, f in v.items()
                 if n.endswith("dp_fast") and "seconds_per_epoch" in f]
        if epoch:
            parts.append(f"one epoch of {case['nominal_n']} examples (extrapolated): "
                         + ", ".join(epoch))
        if parts:
            out.append(f"**{name}**: " + "; ".join(parts) + ".")
    sweep = results.get("sweep")
    if sweep:
        ratios_by_b = sweep["time_ratios"]
        for key in ("tf_dp_fast/tf_plain", "torch_dp_fast/torch_plain"):
            values = [(b, ratios_by_b[str(b)].get(key)) for b in sweep["batches"]]
            values = [(b, x) for b, x in values if x is not None]
            if values:
                out.append(f"**sweep** {key} (time per example) goes from {values[0][1]:.2f} "
                           f"at B={values[0][0]} to {values[-1][1]:.2f} at B={values[-1][0]}.")
    missed = [row for row in results.get("targets", []) if row["verdict"] == "missed"]
    met = [row for row in results.get("targets", []) if row["verdict"] == "met"]
    unmeasured = len(results.get("targets", [])) - len(met) - len(missed)
    out.append(f"**targets**: of the {len(met) + len(missed)} this run measured, {len(met)} "
               f"met and {len(missed)} missed"
               + (f" ({unmeasured} not measured: see Targets)" if unmeasured else "")
               + ("; missed: " + "; ".join(f"{m['case']} {m['target']} "
                                          f"({_num(m['value'], '.2f')})" for m in missed)
                  if missed else "") + ".")
    load = results["loadavg_before"][0], results["loadavg_after"][0]
    cores = results["machine"]["cpu_count"] or 0
    if max(load) > cores:
        out.append(f"**load**: the 1-minute load average was {load[0]:.1f} before and "
                   f"{load[1]:.1f} after on {cores} cores: the machine was shared, wall "
                   "times are inflated unevenly; the process-CPU ratios are the steadier "
                   "reading.")
    return out


def sweep_rows(sweep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The sweep table's header and rows."""
    from benchmarks.sweep import table

    header = ["B"]
    for variant in sweep["points"]:
        header += [f"{variant} ms/example", f"{variant} peak MiB"]
    return header, table(sweep)


def text_summary(results: dict[str, Any]) -> str:
    """Plain-text summary printed by ``dpcompare bench``."""
    out = [f"data: {'; '.join(results['data'].values())}", settings_line(results),
           f"load average (1/5/15 min) before: "
           f"{' '.join(f'{x:.2f}' for x in results['loadavg_before'])}, after: "
           f"{' '.join(f'{x:.2f}' for x in results['loadavg_after'])}"]
    for name, case in results["cases"].items():
        out.append(f"\n{name}: {case['model']}, batch {case['batch_size']}, "
                   f"{case['steps_per_epoch']} steps/epoch of {case['nominal_n']}")
        out.append(f"  {'tier':<20} {'s/step':>8} {'s/epoch':>9} {'ex/s':>7} {'tierMiB':>8}")
        for row in table_rows(case):
            if row[1] == "-":
                out.append(f"  {row[0]:<20} {row[7]}")
            else:
                out.append(f"  {row[0]:<20} {row[1]:>8} {row[2]:>9} {row[3]:>7} {row[4]:>8}")
        for key, wall, spread, cpu, view in ratio_rows(case):
            out.append(f"  {key:<34} {wall:>6} (spread {spread}, cpu {cpu})"
                       + (f"  [{view}]" if view else ""))
        for name, v in case["variants"].items():
            if compile_note(v):
                out.append(f"  {name}: {compile_note(v).removeprefix('; ')}")
        rows = layer_rows(case)
        if rows:
            out.append(f"  per-layer (ms per chunk): {'view':<22} {'layer':<28} {'route':<24} "
                       f"{'norm':>7} {'sum':>7} {'plain':>7} {'extra':>7} {'model':>7} "
                       f"{'meas/mod':>8}  bound")
            for r in rows:
                out.append(f"  {'':<25} {r[0]:<22} {r[1]:<28} {r[6]:<24} {r[8]:>7} "
                           f"{r[9]:>7} {r[10]:>7} {r[11]:>7} {r[12]:>7} {r[13]:>8}  {r[14]}")
            for view in LAYER_VIEWS:
                if (m := modelled_ratio(case, view)) is not None:
                    out.append(f"  modelled DP / plain of the layers, {LAYER_VIEWS[view]}: "
                               f"{m:.2f}")
    sweep = results.get("sweep")
    if sweep:
        header, rows = sweep_rows(sweep)
        out += ["", "sweep (cnn4): " + " | ".join(header)]
        out += ["  " + " | ".join(row) for row in rows]
    out += ["", *target_lines(results)]
    costs = results.get("preset_costs", ())
    if costs:
        out += ["", "estimated training time of the medical presets here (see report.md):",
                *[f"  {line.removeprefix('- ')}" for c in costs
                  for line in (total_line(c), *not_measured_lines(c))]]
    return "\n".join(out)


def md_table(header: list[str], rows: list[list[str]], text_last: bool = False
              ) -> list[str]:
    """A Markdown table: first column left, numbers right (the last left if ``text_last``)."""
    aligns = ["---"] + ["---:"] * (len(header) - 1)
    if text_last:
        aligns[-1] = "---"
    return (["| " + " | ".join(header) + " |", "|" + "|".join(aligns) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def markdown(results: dict[str, Any], command: str) -> str:
    """The report: command, machine, load, method, targets, reading, one table per case,
    ratios, the sweep table and plot."""
    m, s = results["machine"], results["settings"]
    lines = [
        "# dpcompare speed benchmark",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"({results['wall_seconds']:.0f} s).",
        "",
        f"- Machine: {m['platform']}, {m['cpu_count']} CPU cores, no GPU; Python {m['python']}, "
        f"TensorFlow {m['tensorflow']}, TF Privacy {m['tensorflow_privacy']}, torch "
        f"{m['torch']} ({m['torch_threads']} threads), Opacus {m['opacus']}.",
        f"- Load average (1/5/15 min) before: "
        f"{', '.join(f'{x:.2f}' for x in results['loadavg_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in results['loadavg_after'])} "
        "(the machine is shared: a load above the core count slows every variant).",
        f"- Data: {'; '.join(results['data'].values())}.",
        f"- DP settings: Gaussian DP-SGD, C = {s['clip']}, sigma = {s['sigma']}, SGD lr "
        f"{s['lr']}, physical chunks of {s['physical_chunk']} (engine tiers), deterministic "
        f"kernels; OMP_WAIT_POLICY={s.get('omp_wait_policy')} (see benchmarks/runtime.py).",
        "- Tiers (benchmarks/variants.py): `*_plain` the engine's non-private step; "
        "`*_dp_reference` the reference DP engine (TF Privacy vectorized per-example "
        "gradients / Opacus GradSampleModule, hooks); `*_dp_fast` the fast engine (the "
        "default; Book-Keeping clipping: per-layer ghost norm or per-example gradient, "
        "clip-weighted sum from the same backward pass); `torch_*_cl` the torch tier in "
        "channels-last memory format; `tf_privacy_stock` TF Privacy's "
        "VectorizedDPKerasSGDOptimizer through `model.fit` on a tf.data pipeline of the same "
        "fixed-size batches (one fit call per round, its set-up timed); `opacus_stock` "
        "`PrivacyEngine().make_private` defaults and the tutorial loop, with "
        "poisson_sampling=False so that it gets the same fixed-size batches. Two views: "
        "**as users run it** (the stock paths and plain steps at the libraries' defaults, "
        "PyTorch NCHW) and **at its best** (the fast engines, PyTorch channels-last); the "
        "targets are the second's.",
        f"- {settings_line(results)}",
        *([f"- Roofline of the cost model: {roofline_line(results['roofline'])}."]
          if results.get("roofline") else []),
        "- Method: all tiers of a case in one process"
        + (", each case in a fresh process" if results.get("cases_isolated") else "")
        + "; each warmed up first (tracing/"
        "compilation steps not timed), then timed in alternating rounds (order rotated per "
        "round), on the same batches. **Seconds per epoch are extrapolated** from the timed "
        "steps: seconds/step x ceil(N / B); no variant ran a whole epoch. 'round spread' is "
        "(max - min) / mean of the per-round step times. Ratios are of wall-clock seconds "
        "per step; the same ratio of process CPU time is shown beside it (less sensitive to "
        "other processes' load).",
        f"- Memory of a tier (column 'tier MiB', the larger of its two rises): "
        f"{results['memory_method']}."
        + ((" The largest case's process" if results.get("cases_isolated")
            else " The whole process")
           + f" (both frameworks, every tier's model and the data loaded) peaked at "
           f"{results['process_peak_rss_mb']:.0f} MiB: a figure of no single tier."
           if results.get("process_peak_rss_mb") else "")
        + " The memory targets use the sweep, where every point runs in a process of its "
        "own (its peak is that point's alone).",
        "",
        "## Targets",
        "",
        *[f"- {t}" for t in target_lines(results)],
        "",
        "## Reading",
        "",
        *[f"- {t}" for t in reading(results)],
        "",
        *section_lines(results.get("preset_costs", ()), m.get("torch_threads")),
    ]
    for name, case in results["cases"].items():
        lines += [f"## {name}: {case['model']}, batch {case['batch_size']}, input "
                  f"{'x'.join(map(str, case['input_shape']))}",
                  "",
                  f"{case['data']}; {case['steps_per_epoch']} steps per epoch of "
                  f"{case['nominal_n']} examples; {case['rounds']} rounds x "
                  f"{case['steps_per_round']} steps per tier"
                  + (f" ({case['slow_steps_per_round']} for the per-example tiers)"
                     if case.get("slow_steps_per_round") else "") + ".",
                  "",
                  *md_table(["tier", "s/step", "s/epoch", "examples/s", "tier MiB",
                              "rise MiB (warm-up)", "rise MiB (timed)", "note"],
                             table_rows(case), text_last=True),
                  "",
                  *md_table(["ratio", "wall clock", "round spread", "process CPU", "view"],
                             ratio_rows(case), text_last=True),
                  ""]
        if case.get("layers"):
            modelled = [f"{LAYER_VIEWS[v]} {m:.2f}" for v in LAYER_VIEWS
                        if (m := modelled_ratio(case, v)) is not None]
            lines += ["Per-layer cost of the fast DP step (benchmarks/layer_costs.py: one chunk of "
                      f"{min(case['batch_size'], 256)} random examples; ms, best of 3; the route "
                      "each layer takes is chosen as the engine chooses it, by timing its "
                      "candidate routes (the rule's default in brackets where another won); "
                      "'plain' is the layer's weight-gradient op, 'extra' = norm + sum - plain; "
                      "'model extra' the cost model's (benchmarks/costmodel.py, this CPU's "
                      "roofline) route minus weight gradient; 'measured / model' the route's "
                      "measured norm + sum over its modelled time):", "",
                      *md_table(LAYER_HEADER, layer_rows(case)), ""]
            if modelled:
                lines += ["Modelled DP / plain of the trainable layers (forward, input gradient, "
                          "and weight gradient or route; activations, pooling and the optimizer "
                          "left out): " + ", ".join(modelled) + ".", ""]
    sweep = results.get("sweep")
    if sweep:
        header, rows = sweep_rows(sweep)
        where = ("each point in a fresh process (peak RSS is the point's own)"
                 if sweep["isolated"] else "all points in one process")
        lines += ["## Batch-size sweep (cnn4, 28x28)", "",
                  f"Time per example (wall clock) and peak RSS of the fast engines and their "
                  f"plain steps; {where}; random uint8 data of MNIST's shape, chunks of 256.",
                  "", f"![sweep]({SWEEP_PLOT})", "", *md_table(header, rows), "",
                  *md_table(["B", *[f"time {k}" for k in
                                     next(iter(sweep["time_ratios"].values()), {})],
                              *[f"CPU {k}" for k in
                                next(iter(sweep.get("cpu_time_ratios", {}).values()), {})],
                              "peak RSS tf_dp_fast/tf_plain",
                              "peak RSS torch_dp_fast/torch_plain"],
                             [[b, *[_num(x, ".2f") for x in sweep["time_ratios"][b].values()],
                               *[_num(x, ".2f") for x in
                                 sweep.get("cpu_time_ratios", {}).get(b, {}).values()],
                               _num(sweep["memory_ratios"][b].get("tf_dp_fast/tf_plain"),
                                    ".2f"),
                               _num(sweep["memory_ratios"][b].get(
                                   "torch_dp_fast/torch_plain"), ".2f")]
                              for b in map(str, sweep["batches"])]),
                  ""]
    return "\n".join(lines)


def write_report(results: dict[str, Any], out_dir: str | Path, command: str) -> Path:
    """Write ``report.md``, ``results.json`` and (with a sweep) ``sweep.png`` into
    ``out_dir``; returns the report path."""
    from benchmarks.sweep import plot_sweep
    from dpcore.io import atomic_write_json, atomic_write_text

    out = Path(out_dir)
    atomic_write_json(out / "results.json", results)
    if results.get("sweep"):
        plot_sweep(results["sweep"], out / SWEEP_PLOT)
    path = out / "report.md"
    atomic_write_text(path, markdown(results, command))
    return path
