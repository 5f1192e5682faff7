"""An AgentRL task worker (the real agentrl-worker TaskWorker and its HTTP API) whose task
gets its desktops from Drums through drums.agentrl. Run by test_agentrl.py as a subprocess:
    python agentrl_app.py PORT   (DRUMS_URL / DRUMS_TOKEN name the Drums host)"""

from __future__ import annotations

import json
import os
import sys

from agentrl.worker.environment import EnvironmentDelegation
from agentrl.worker.task import Session, Task
from agentrl.worker.task_worker import TaskWorker
from agentrl.worker.typings import SampleStatus, TaskSampleExecutionResult

from drums.agentrl import create_controller


class DesktopDelegation(EnvironmentDelegation):
    def get_subtypes(self):
        return ["desktop"]


class DesktopShellTask(Task):
    """Sample i: the environment computes i*7, the agent answers with a file to write,
    the task writes it, resets the desktop and checks the file is gone."""

    def __init__(self):
        super().__init__(name="drums-desktop", concurrency=4, full_async=True)
        self.controller = create_controller(
            "drums",
            DesktopDelegation("drums-desktop"),
            endpoints=[{"url": os.environ["DRUMS_URL"], "token": os.environ["DRUMS_TOKEN"]}],
            specs={"desktop": {"image": "minimal", "screen": "320x240"}},
            wait_s=20,
        )

    def get_indices(self):
        return [1, 2, 3]

    async def start_sample(self, index, session: Session):
        c = self.controller
        sid, envs, urls = await c.start_session("desktop")
        env = envs["desktop"]
        try:
            rc, out, err = await c.execute_command(env, ["sh", "-c", f"echo $(({index} * 7)); id -u"])
            reply = await session.action(
                {
                    "role": "user",
                    "content": f"product={out.decode().split()[0]} uid={out.decode().split()[1]} url={urls['desktop']}",
                }
            )
            path = reply.messages[0]["content"].strip()
            written = await c.execute_shell(env, f"echo drums > {path} && cat {path}")
            variables = await c.get_env_variables(env)
            await c.renew_session(sid)
            await c.reset_session(sid)
            after = await c.execute_command(env, ["sh", "-c", f"test -e {path}; echo $?"])
            result = {
                "rc": rc,
                "written": written.decode().strip(),
                "gone_after_reset": after[1].decode().strip() == "1",
                "generation": c.session_of(env).generation,
                "home": variables.get("HOME"),
                "env": env,
            }
            # The worker's HTTP answer carries the history, not the result: put it there too.
            session.inject({"role": "user", "content": json.dumps(result)})
            return TaskSampleExecutionResult(status=SampleStatus.COMPLETED, result=result)
        finally:
            await c.end_session(sid)

    def release(self):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1])
    # No AgentRL controller runs here: the worker's heartbeats to it fail and are logged, as designed.
    TaskWorker(
        DesktopShellTask(), controller_address="http://127.0.0.1:9/api", self_address=f"http://127.0.0.1:{port}/api"
    ).run("127.0.0.1", port)
