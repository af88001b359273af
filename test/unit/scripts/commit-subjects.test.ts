// The commit-subject rule (scripts/commit-subjects.ts): what passes, what fails and why. The
// history since its base is checked by `npm run lint`, which runs the script.
import t from 'tap';
import { subjectOf, subjectProblem } from '../../../scripts/commit-subjects.js';

t.test('subjects that keep the rule', async (t) => {
  for (const s of [
    'nfs: split the controller folder into rpc, store, copy, snapshots',
    'kubelet tier: the node DaemonSet keeps off the control-plane Node',
    'docs/testing.md: one tiers table',
    'ci: promtool from Debian, csi-sanity and helm cached by version',
  ])
    t.equal(subjectProblem(s), undefined, s);
});

t.test('subjects that break it', async (t) => {
  t.match(subjectProblem(`nfs: ${'x'.repeat(70)}`), /^75 characters/);
  t.match(subjectProblem('NFS tree copy over NFSv4.0 the controller keeps state'), /not `<area>: <what>`/);
  t.match(subjectProblem('a very long area name here: x'), /not `<area>: <what>`/);
  t.match(subjectProblem('fixup! nfs: x'), /not `<area>: <what>`/);
  t.match(subjectProblem('nfs:no space'), /not `<area>: <what>`/);
  t.match(subjectProblem('nfs: ends with a stop.'), /full stop/);
  t.match(subjectProblem(''), /not `<area>: <what>`/);
});

t.test('the subject of a message file skips comments and blank lines', async (t) => {
  t.equal(subjectOf('# Please enter\n\nnfs: x\n\nbody\n'), 'nfs: x');
});
