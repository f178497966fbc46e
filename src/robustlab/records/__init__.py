"""Records of what was run: the run ids and stored-run records (:mod:`.identity`), the input
content hashes that go into them (:mod:`.content_hash`), a generated folder's manifest (name,
writer, readers: :mod:`.manifest`) and the record a workflow keeps in it
(:mod:`.folder_record`).

Records are data that outlive a run; the work itself is :mod:`robustlab.execution`'s, and the
jobs a user starts are :mod:`robustlab.workflows`'. Import the modules themselves: this
package re-exports nothing, so that ``manifest`` (low in the layers) never loads ``identity``.
"""
