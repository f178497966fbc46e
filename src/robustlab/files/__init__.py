"""Files robustlab writes and reads, and the rules that keep them safe: one home each.

Why a package of its own: where an output may go and what it may replace, how its bytes
reach the disk, and whether a read stays inside the folder being read were once spread
over three top-level modules and a command helper, so a rule fixed in one place could stay
open in another. Each part has one job; callers import the part they need (this package
imports none of them, so ``--help`` stays light):

- :mod:`robustlab.files.safety`: outputs never clobber inputs (``check_outputs``), a file
  of another kind is replaced only with ``--force`` (``check_replaceable``,
  ``write_output``), no folder is written into by surprise (``check_out_folder``,
  ``claim_out_folder``), and links never leave the data root (``walk_files``,
  ``file_inside``, ``named_file``, ``LinkRule``, ``why_not_inside``,
  ``refuse_write_through``).
- :mod:`robustlab.files.atomic`: atomic writes (``atomic_write``, ``atomic_path``: a temp
  file beside the target renamed into place; ``temp_name``, ``remove_temp_files``), the one
  temp-file rule of every writer.
- :mod:`robustlab.files.outputs`: generate's output folder, local or any fsspec URL
  (``open_folder``: ``LocalFolder``, ``UrlFolder``), with its manifest and lock.
- :mod:`robustlab.files.hashes`: the content hash of every file generate writes, recorded
  as it is written and checked by every reader.

The command layer keeps only its table of which flag of which command is an input or an
output (``robustlab.commands._outputs``), since that table reads the store's records.
"""
