"""torchrun as Debian 12 ships it (torch 1.13.1, Python 3.11) dies at start in Std.from_str:
on 3.11, iterating an IntFlag skips its zero member, so "0" maps to None. This wrapper
replaces that one function with a value lookup, then runs torchrun's own main()."""
import re

from torch.distributed.elastic.multiprocessing import api


def _from_str(value):
    if re.fullmatch(r"[0-3]", value):
        return api.Std(int(value))
    return {int(rank): api.Std(int(std)) for rank, std in (m.split(":") for m in value.split(","))}


api.Std.from_str = staticmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    main()
