import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { invokesSudo, normalizeCommand, shellInvokesSudo } from '../../src/osworld/command.ts';

// Which OSWorld commands "really invoke sudo" (routes/execute.ts elevates only those, and only on /setup/ routes).
describe('osworld: invokesSudo', () => {
  it("finds sudo in command position, as every task file's set-up and postconfig step uses it", () => {
    for (const s of [
      'echo password | sudo -S apt update -y && echo password | sudo -S apt install jq -y',
      'echo password | sudo -S su - charles',
      'echo password | sudo -S mkdir ~/Desktop/todo_list_Jan_1',
      'sudo true',
      'X=1 sudo true',
      'if sudo true; then :; fi',
      '(sudo true)',
      'a; sudo b',
      'a\nsudo b',
      'echo $(sudo id)',
      'echo `sudo id`',
      '"sudo" true',
    ])
      assert.equal(shellInvokesSudo(s), true, s);
    assert.equal(invokesSudo(['/bin/sh', '-c', "echo password | sudo -S python3 -c 'x' a b"]), true);
    assert.equal(invokesSudo(['/usr/bin/sudo', '-S', 'id']), true);
    assert.equal(normalizeCommand('echo password | sudo -S id -u', true).sudo, true);
  });

  it('does not count a comment, an argument or a longer word', () => {
    for (const s of ['id -u # sudo', '# sudo\nid', 'echo sudo', 'echo "a sudo b"', "echo 'x; sudo y'", 'sudoku', 'xsudo true', 'echo a#sudo', 'ls sudo'])
      assert.equal(shellInvokesSudo(s), false, s);
    // desktop_env's PythonController sends every action as ['python', '-c', code] without a shell.
    assert.equal(normalizeCommand(['python', '-c', 'import os; print(os.getuid())  # sudo'], false).sudo, false);
    assert.equal(normalizeCommand(['python', '-c', 'import subprocess; subprocess.run("sudo id", shell=True)'], false).sudo, false);
    assert.equal(normalizeCommand('echo | sudo -S id', false).sudo, false, 'without a shell, | and sudo are echo arguments');
  });
});
