"""session.fork(n) against a real daemon: copies with the source's files and their own identity."""
import pytest

from drums import errors


def test_fork_copies_files_with_fresh_identity(client):
    with client.sessions.create(image="minimal") as src:
        src.files.write("/home/user/state.txt", "step 3\n")
        copies = src.fork(2)
        try:
            assert len(copies) == 2
            ids = {src.id, *(c.id for c in copies)}
            assert len(ids) == 3
            for c in copies:
                assert c.state == "ready" and c.info["labels"]["drums.fork.source"] == src.id
                assert c.files.read("/home/user/state.txt") == b"step 3\n"
                assert c.exec(["hostname"])["stdout"].strip() == c.id
            with pytest.raises(errors.InvalidFork):
                src.fork(0)
            with pytest.raises(errors.MemoryForkUnavailable):
                src.fork(1, mode="memory")
        finally:
            for c in copies:
                c.destroy()
