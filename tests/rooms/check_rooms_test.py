#!/usr/bin/python3
"""check_rooms.py on small made-up trees: a clean one passes, and each kind of crossing
include fails with a line naming the file, the rooms and the include."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_rooms.py")


def make_tree(root, extra):
    files = {
        "contract/include/ddprun/contract/errors.h": "#pragma once\n#include <string>\n",
        "common/include/ddprun/common/files.h": '#include "ddprun/contract/errors.h"\n',
        "schedulers/cluster.h": '#include "ddprun/common/files.h"\n',
        "launcher/src/plan/plan.h": '#include "cluster.h"\n',
        "launcher/src/output/output_relay.h": '#include "report/labels.h"\n',
        "launcher/src/run/job.cc": '#include "plan/plan.h"\n#include "cluster.h"\n',
        "launcher/src/policy/round.h": '#include "run/job.h"\n#include "output/output_relay.h"\n',
        "launcher/src/job/main.cc": '#include "run/job.h"\n#include "plan/plan.h"\n',
        "launcher/src/run/job.h": "",
        "launcher/src/report/labels.h": '#include "plan/plan.h"\n',
        "launcher/src/cli/options.h": '#include "report/labels.h"\n',
        "launcher/src/nodes/agents.h": '#include "report/labels.h"\n#include "run/job.h"\n',
        "launcher/src/job/agent_options.h": '#include "cli/options.h"\n#include "nodes/agents.h"\n',
        "worker/lib/include/ddprun/worker/ddp.h": "#include <torch/torch.h>\n",
        "worker/train/trainer.cc": '#include "ddprun/worker/ddp.h"\n',
    }
    files.update(extra)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)


def run(extra):
    with tempfile.TemporaryDirectory() as root:
        make_tree(root, extra)
        done = subprocess.run([sys.executable, CHECK, "--root", root], capture_output=True,
                              text=True)
        return done.returncode, done.stdout


def main():
    failures = []
    checked = 0

    def expect(name, extra, code, line=None):
        nonlocal checked
        checked += 1
        got_code, out = run(extra)
        if got_code != code or (line is not None and line not in out):
            failures.append(f"{name}: exit {got_code}, output {out!r}; expected exit {code}"
                            + (f" and {line!r}" if line else ""))

    expect("clean tree", {}, 0)
    expect("a reader includes the launcher", {"schedulers/slurm.cc": '#include "plan.h"\n'}, 1,
           "schedulers/slurm.cc:1: schedulers includes launcher/plan (plan.h)")
    expect("the launcher reaches LibTorch",
           {"launcher/src/nodes/x.cc": "#include <torch/torch.h>\n"}, 1,
           "launcher/src/nodes/x.cc:1: launcher/nodes includes LibTorch (torch/torch.h)")
    expect("a launcher room includes a later one",
           {"launcher/src/plan/x.cc": '#include "plan/plan.h"\n#include "run/job.h"\n'}, 1,
           "launcher/src/plan/x.cc:2: launcher/plan includes launcher/run (run/job.h)")
    expect("the report reaches the command line",
           {"launcher/src/report/x.cc": '#include "cli/options.h"\n',
            "launcher/src/cli/options.h": ""}, 1,
           "launcher/src/report/x.cc:1: launcher/report includes launcher/cli (cli/options.h)")
    expect("a room past the command line includes the options",
           {"launcher/src/policy/x.h": '#include "cli/options.h"\n'}, 1,
           "launcher/src/policy/x.h:1: launcher/policy includes the options (cli/options.h)")
    expect("the output reaches the runner",
           {"launcher/src/output/x.cc": '#include "run/job.h"\n'}, 1,
           "launcher/src/output/x.cc:1: launcher/output includes launcher/run (run/job.h)")
    expect("the runner reaches the policy",
           {"launcher/src/run/x.cc": '#include "policy/round.h"\n'}, 1,
           "launcher/src/run/x.cc:1: launcher/run includes launcher/policy (policy/round.h)")
    expect("a launcher source outside the rooms", {"launcher/src/x.cc": ""}, 1,
           "launcher/src/x.cc: launcher source outside its rooms")
    expect("the contract includes a utility",
           {"contract/x.cc": '\n#include "ddprun/common/files.h"\n'}, 1,
           "contract/x.cc:2: contract includes common (ddprun/common/files.h)")
    expect("the worker library includes the program",
           {"worker/lib/src/ddp.cc": '#include "trainer.h"\n', "worker/train/trainer.h": ""}, 1,
           "worker/lib/src/ddp.cc:1: worker library includes ddp-train (trainer.h)")
    expect("the worker includes the launcher", {"worker/train/main.cc": '#include "plan.h"\n'}, 1,
           "worker/train/main.cc:1: ddp-train includes launcher/plan (plan.h)")
    for failure in failures:
        print("FAIL: " + failure)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
