"""The images of a finished run's result, kept beside its row of the run index (meta_agent.store.run_index), whose JSON
(the structured result) never holds them: so that the result read through any replica, or after a restart, carries
them as the replica that ran it returned them, in the same order, base64 for base64.

A result carries at most what meta_agent.core.result bounds (MAX_RESULT_IMAGES, MAX_RESULT_IMAGE_CHARS), where it is
made: what is kept here is that, and no more. They are written in the transaction that marks the run done, and read
only with the row of a run its reader owns. They go, as what the views kept of a run goes, some days after it ended
(`forget`); its row then counts them among the images its result no longer carries (`images_left_out`).
"""

from __future__ import annotations

from collections.abc import Sequence

from meta_agent.core.messages import ImagePart
from meta_agent.store.database import Sql


def keep(sql: Sql, run_id: str, images: Sequence[ImagePart]) -> None:
    """The images of the run's result are `images` (a run finished once more, by a replay, keeps its last)."""
    sql.execute("delete from run_images where run_id = ?", (run_id,))
    for seq, image in enumerate(images, 1):
        sql.execute(
            "insert into run_images (run_id, seq, mime_type, data) values (?, ?, ?, ?)",
            (run_id, seq, image.mime_type, image.data),
        )


def read(sql: Sql, run_id: str) -> tuple[ImagePart, ...]:
    """The images of the run's result, in their order; the caller has read the run's row for its owner."""
    rows = sql.all("select mime_type, data from run_images where run_id = ? order by seq", (run_id,))
    return tuple(ImagePart(data=str(data), mime_type=str(mime_type)) for mime_type, data in rows)


def forget(sql: Sql, ended: str, params: Sequence[object]) -> int:
    """Drop the images of the runs the query `ended` (with `params`) selects, each run's row counting them as left
    out of its result from now on; how many images."""
    runs = f"select distinct run_id from run_images where run_id in ({ended})"
    sql.execute(
        "update runs set images_left_out = images_left_out"
        f" + (select count(*) from run_images i where i.run_id = runs.id) where id in ({runs})",
        params,
    )
    return sql.execute(f"delete from run_images where run_id in ({ended})", params)
