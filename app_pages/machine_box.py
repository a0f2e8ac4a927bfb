"""The sidebar's *About this machine*: the CPU and the kernels PyTorch runs at here, the fast paths
the engine takes or the portable ones it falls back to (`taps.machine`), and what that means for
the numbers a page shows."""

import streamlit as st

from taps import machine
from taps.linear import kernel_name
from taps.pair import ModelPair


def portable_paths() -> tuple[str, ...]:
    """The fallbacks in force (a key for the cached pair: a pair loaded with oneDNN is not reused
    once it is turned off)."""
    return tuple(f.key for f in machine.fallbacks())


def about_this_machine(pair: ModelPair | None) -> None:
    found = machine.announce()                       # each fallback in the server's log, once
    label = "About this machine" + (f" · {len(found)} portable path{'s' * (len(found) > 1)}" if found else "")
    with st.expander(label, icon=":material/memory:", expanded=bool(found)):
        facts = machine.about()
        lines = [f"- **{name}**: {value}" for name, value in facts.items()]
        if pair is not None and str(pair.device) == "cpu":
            gemm = "oneDNN's packed linear" if kernel_name(pair.target) == "onednn" else "PyTorch's default kernels"
            drafts = {"int8": "int8 (dynamic quantization)", "same": str(pair.dtype).replace("torch.", ""),
                      "bfloat16": "bfloat16"}.get(pair.drafter_precision, pair.drafter_precision)
            lines += [f"- **Target's products of several rows**: {gemm}", f"- **Drafter drafts in**: {drafts}"]
        elif pair is not None:
            lines.append(f"- **Device**: {pair.device} ({str(pair.dtype).replace('torch.', '')})")
        st.markdown("\n".join(lines))
        for item in found:
            st.warning(f"Portable path: {item.text}.", icon=":material/info:")
        st.caption("Float kernels differ between CPUs, so near-ties in the drafter's ranking can fall the other "
                   "way: a tree, a τ or a speed-up here may differ slightly from the reference CPU's figures in "
                   "the docs, while every output stays the target's own. The shipped latency profile is the "
                   "reference CPU's until this machine's is measured (above).")
