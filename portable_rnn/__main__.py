"""`python -m portable_rnn`: the environment, and the routing decisions for common calls.

Like ``python -m torch.utils.collect_env``: paste its output into bug reports.
``python -m portable_rnn selftest [--json PATH]`` runs every route this machine takes against the
portable path (see `portable_rnn._src.tools.selftest`); its exit code is non-zero if any case
fails.
"""

from __future__ import annotations

import argparse

import jax

from ._src.core.capabilities import capabilities
from ._src.core.dispatch import policy
from ._src.tools import selftest
from ._src.tools.env import versions
from ._src.tools.rules import PRETEND_GPU, attention_table, decision_table, family_table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m portable_rnn", description=__doc__.splitlines()[0])
    p.add_argument("--pretend-gpu", action="store_true",
                   help="also show the decisions a GPU with cuDNN 9.8 (sm90) would make")
    commands = p.add_subparsers(dest="command")
    st = commands.add_parser("selftest", help="run every route this machine takes against the "
                             "portable path; exit code 1 if any case fails")
    st.add_argument("--json", metavar="PATH", help="also write the rows and environment as JSON")
    st.add_argument("--repeats", type=int, default=selftest.REPEATS, metavar="N",
                    help=f"timed runs per route for the speed ratio (default {selftest.REPEATS}; "
                    "1 for a quick correctness check)")
    args = p.parse_args(argv)
    if args.command == "selftest":
        if args.repeats < 1:
            p.error(f"--repeats must be >= 1; got {args.repeats}")
        return selftest.command(args.json, args.repeats)
    print("\n".join(versions()))
    print(f"devices: {jax.devices()}")
    caps = capabilities()
    print(f"capabilities: {caps}")
    machines = [("this machine", caps)]
    if args.pretend_gpu or not caps.is_cuda_gpu:
        machines.append(("a pretend GPU", PRETEND_GPU))
    for title, c in machines:
        print(f"\nLSTM decisions on {title} ({c}), B=32 T=128 I=H=256 L=2:")
        with policy(capabilities=c):
            print("\n".join(decision_table(c)))
            print(f"\nEvery family's and the projected LSTM's decisions on {title}, float32:")
            print("\n".join(family_table(c)))
            print(f"\nAttention decisions on {title}, B=4 N=8 H=64:")
            print("\n".join(attention_table(c)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
