"""A process killed while saving never leaves a truncated `checkpoint_last.pt`.

fairseq 0.12 writes the first checkpoint of a save atomically (`torch_persistent_save`: into
`NAME.tmp`, then rename), but writes the others, `checkpoint_last.pt` among them whenever an epoch
or `--save-interval-updates` checkpoint is saved at the same time, with `PathManager.copy`, which is
a plain `shutil.copyfile` over the old file: a SIGKILL, an out-of-memory kill or a preemption
during that copy leaves a truncated `checkpoint_last.pt`, and the next run cannot resume.

When the plugin is loaded, a local copy goes to a temporary file beside the destination, which
is then renamed over it (`checkpoint_io.write_atomically`; `os.replace` is atomic on POSIX): the
destination holds the old checkpoint or the new one, never part of one. A kill may leave a
`.partial-*.pt` file behind, never a broken `checkpoint_last.pt`. Copies to or from remote storage
(iopath handlers) are unchanged.
"""
import os
import shutil

from fairseq.file_io import PathManager

from ..checkpoint_io import write_atomically

_fairseq_copy = PathManager.copy


def _is_local(path: str) -> bool:
    return "://" not in str(path)


def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """fairseq's `PathManager.copy`, made atomic for local files."""
    if not (_is_local(src_path) and _is_local(dst_path)):
        return _fairseq_copy(src_path, dst_path, overwrite)
    if not overwrite and os.path.exists(dst_path):
        return False
    write_atomically(dst_path, lambda tmp: shutil.copyfile(src_path, tmp))
    return True


PathManager.copy = staticmethod(copy)
