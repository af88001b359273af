// StorageClass parameters, subDir templates, path validation and the volume-handle codec.
import t from 'tap';
import { isCsiError } from '../../../../src/errors.js';
import { expandSubDir, parseCreateParams } from '../../../../src/nfs/controller/params.js';
import { normaliseShare } from '../../../../src/nfs/path-rules.js';
import { parseOctalMode } from '../../../../src/nfs/param-keys.js';
import { archivePath, stamp } from '../../../../src/nfs/controller/rpc/policy.js';
import { composeVolumeId, parseVolumeId } from '../../../../src/nfs/volume-id.js';

const kind = (fn: () => unknown) => {
  try {
    fn();
    return 'no error';
  } catch (e) {
    return isCsiError(e) ? `${e.kind}: ${e.message}` : `not a CsiError: ${String(e)}`;
  }
};

const seed = {
  server: 'nas.local.bigd.no',
  share: '/volume1/k8s-volumes/talos',
  subDir: '${pvc.metadata.namespace}/${pvc.metadata.name}',
  onDelete: 'archive',
  'csi.storage.k8s.io/pvc/namespace': 'monitoring',
  'csi.storage.k8s.io/pvc/name': 'grafana',
  'csi.storage.k8s.io/pv/name': 'pvc-0b1c',
};

t.test('the seed StorageClass resolves to <namespace>/<pvc> under the share', async (t) => {
  const p = parseCreateParams('pvc-0b1c', seed, 'delete');
  t.same(p, {
    server: 'nas.local.bigd.no',
    share: '/volume1/k8s-volumes/talos',
    subDir: 'monitoring/grafana',
    subDirFromParam: true,
    mountPermissions: undefined,
    onDelete: 'archive',
    uid: undefined,
    gid: undefined,
  });
});

t.test('keys are case-insensitive; uid, gid and mountPermissions parse', async (t) => {
  const p = parseCreateParams(
    'pv-1',
    { SERVER: '10.0.0.5', Share: 'export/', MountPermissions: '02775', UID: '1000', gid: '0', OnDelete: 'Retain' },
    'delete',
  );
  t.equal(p.server, '10.0.0.5');
  t.equal(p.share, '/export');
  t.equal(p.subDir, 'pv-1', 'without subDir the directory is the PV name');
  t.equal(p.subDirFromParam, false);
  t.equal(p.mountPermissions, 0o2775);
  t.equal(p.uid, 1000);
  t.equal(p.gid, 0);
  t.equal(p.onDelete, 'retain');
  t.equal(parseCreateParams('x', { server: 's' }, 'archive').onDelete, 'archive', 'driver default applies');
  t.equal(
    parseCreateParams('x', { server: 's', mountPermissions: '0' }, 'delete').mountPermissions,
    undefined,
    '0 = no chmod',
  );
  t.equal(parseCreateParams('x', { server: 's' }, 'delete').share, '/');
});

t.test('bad parameters are InvalidArgument naming the key or value', async (t) => {
  t.match(
    kind(() => parseCreateParams('v', { server: 's', mountOptions: 'nfsvers=4' }, 'delete')),
    /^InvalidArgument: unknown parameter "mountOptions"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', 'csi.storage.k8s.io/fstype': 'ext4' }, 'delete')),
    /InvalidArgument: unknown parameter "csi.storage.k8s.io\/fstype"/,
  );
  t.match(
    kind(() => parseCreateParams('v', {}, 'delete')),
    /InvalidArgument: parameter "server" is required/,
  );
  t.match(
    kind(() => parseCreateParams('v', { share: '/x' }, 'delete')),
    /"server"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', onDelete: 'shred' }, 'delete')),
    /InvalidArgument: .*"onDelete" value "shred"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', mountPermissions: '0999' }, 'delete')),
    /InvalidArgument: .*mountPermissions.*"0999"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', mountPermissions: '17777' }, 'delete')),
    /InvalidArgument/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', uid: '-1' }, 'delete')),
    /InvalidArgument: parameter "uid" value "-1"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', gid: '2147483648' }, 'delete')),
    /InvalidArgument: parameter "gid"/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 's', Server: 't' }, 'delete')),
    /InvalidArgument: parameter "server" is given twice/,
  );
  t.match(
    kind(() => parseCreateParams('v', { server: 'a/b' }, 'delete')),
    /InvalidArgument: parameter "server"/,
  );
});

t.test('subDir paths are validated after template expansion', async (t) => {
  const meta = {
    'csi.storage.k8s.io/pvc/namespace': 'ns',
    'csi.storage.k8s.io/pvc/name': 'data',
    'csi.storage.k8s.io/pv/name': 'pvc-1',
  };
  const sub = (subDir: string, extra: Record<string, string> = meta) =>
    kind(() => parseCreateParams('pvc-1', { server: 's', subDir, ...extra }, 'delete'));
  t.equal(sub('a/${pv.metadata.name}'), 'no error');
  t.match(sub('../escape'), /InvalidArgument: subDir "..\/escape" must not contain ".."/);
  t.match(sub('a/../../b'), /must not contain ".."/);
  t.match(sub('./a'), /must not contain "."/);
  t.match(sub('/abs/path'), /InvalidArgument: subDir "\/abs\/path" must be relative/);
  t.match(sub('a//b'), /empty path segment/);
  t.match(sub('a/b/'), /empty path segment/);
  t.match(sub('x'.repeat(256)), /longer than 255 bytes/);
  t.equal(sub('x'.repeat(255)), 'no error');
  t.match(sub('ø'.repeat(128)), /longer than 255 bytes/, 'bytes, not characters');
  t.match(sub('a#b'), /"#"/);
  t.match(
    sub('${pvc.metadata.namespace}/${pvc.metadata.name}', {}),
    /InvalidArgument: .*\$\{pvc.metadata.namespace\}.*csi.storage.k8s.io\/pvc\/namespace.*--extra-create-metadata/,
  );
  t.match(sub('${pvc.metadata.labels}'), /unknown template/);
  t.match(
    sub('${pvc.metadata.name}', { ...meta, 'csi.storage.k8s.io/pvc/name': '..' }),
    /must not contain ".."/,
    'expanded values are validated too',
  );
  t.match(
    kind(() => parseCreateParams('a/b', { server: 's' }, 'delete')),
    /InvalidArgument: volume name "a\/b"/,
  );
  t.match(
    kind(() => parseCreateParams('..', { server: 's' }, 'delete')),
    /InvalidArgument/,
  );
  t.match(
    kind(() => normaliseShare('/a/../b')),
    /InvalidArgument: share/,
  );
});

t.test('template expansion', async (t) => {
  t.equal(
    expandSubDir('${pvc.metadata.namespace}-${pvc.metadata.name}/${pv.metadata.name}', {
      'csi.storage.k8s.io/pvc/namespace': 'ns',
      'csi.storage.k8s.io/pvc/name': 'claim',
      'csi.storage.k8s.io/pv/name': 'pvc-9',
    }),
    'ns-claim/pvc-9',
  );
  t.equal(expandSubDir('plain/dir', {}), 'plain/dir');
  t.equal(parseOctalMode('', 'm'), undefined);
  t.equal(parseOctalMode('777', 'm'), 0o777);
});

t.test('volume handles are composed exactly like upstream', async (t) => {
  const p = parseCreateParams('pvc-0b1c', seed, 'delete');
  t.equal(
    composeVolumeId({ ...p, uuid: 'pvc-0b1c' }),
    'nas.local.bigd.no#volume1/k8s-volumes/talos#monitoring/grafana#pvc-0b1c#archive',
  );
  t.equal(
    composeVolumeId({ server: 's', share: '/share', subDir: 'pvc-1', uuid: '', onDelete: 'delete' }),
    's#share#pvc-1##',
  );
  t.equal(composeVolumeId({ server: 's', share: '/', subDir: 'd', uuid: 'pv', onDelete: 'retain' }), 's##d#pv#retain');
});

t.test('handles parse, including the old slash form; junk is null', async (t) => {
  t.same(parseVolumeId('nas.local.bigd.no#volume1/k8s-volumes/talos#monitoring/grafana#pvc-0b1c#archive'), {
    server: 'nas.local.bigd.no',
    share: '/volume1/k8s-volumes/talos',
    subDir: 'monitoring/grafana',
    uuid: 'pvc-0b1c',
    onDelete: 'archive',
  });
  t.same(parseVolumeId('s#share#pvc-1##'), {
    server: 's',
    share: '/share',
    subDir: 'pvc-1',
    uuid: '',
    onDelete: undefined,
  });
  t.same(
    parseVolumeId('s#share#pvc-1'),
    { server: 's', share: '/share', subDir: 'pvc-1', uuid: '', onDelete: undefined },
    'three fields',
  );
  t.equal(parseVolumeId('s#share#pvc-1#u#RETAIN')?.onDelete, 'retain');
  t.same(parseVolumeId('nas.local/volume1/k8s-volumes/talos/pvc-42'), {
    server: 'nas.local',
    share: '/volume1/k8s-volumes/talos',
    subDir: 'pvc-42',
    uuid: '',
    onDelete: undefined,
  });
  for (const bad of [
    '',
    'some-id',
    'a#b',
    's#share##',
    's#share#../x#',
    's#share#a/../b#',
    's#share#d#u#shred',
    's#../x#d#',
    'nas/pvc',
  ]) {
    t.equal(parseVolumeId(bad), null, `"${bad}" is not a handle we act on`);
  }
});

t.test('archive names', async (t) => {
  t.equal(archivePath('monitoring/grafana'), 'archived-monitoring/grafana');
  t.equal(archivePath('pvc-1'), 'archived-pvc-1');
  t.equal(Buffer.byteLength(archivePath('x'.repeat(255))), 255);
  t.equal(stamp(new Date('2026-01-31T23:59:58.123Z')), '20260131T235958Z');
});
