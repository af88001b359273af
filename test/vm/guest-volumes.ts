// Proxmox volumes of a VM-tier scenario: created and published to the guest's VM by the
// controller on the host, staged and published by the node plugin in the guest at one staging
// path and one target. close() undoes whatever is still published or created.
import type { CreatedVolume, CsiClient, VolumeCapability } from '../helpers/csi-client.js';
import { present } from '../helpers/present.js';
import { stageAndPublish, unpublishAndUnstage } from '../helpers/stage-publish.js';

const GiB = 2 ** 30;

/** What a scenario keeps of a created volume. */
export type GuestVolume = Pick<CreatedVolume, 'volumeId' | 'volumeContext'>;

export interface GuestVolumesOptions {
  /** The controller on the host and the node plugin in the guest. */
  c: CsiClient;
  n: CsiClient;
  nodeId: string;
  cap: VolumeCapability;
  staging: string;
  target: string;
  /** StorageClass parameters of every volume created (1 GiB each). */
  parameters: Record<string, string>;
  say: (msg: string) => void;
}

export class GuestVolumes {
  private readonly created: string[] = [];
  private readonly published = new Set<string>();

  constructor(private readonly o: GuestVolumesOptions) {}

  async create(name: string): Promise<CreatedVolume> {
    const { c, cap, parameters } = this.o;
    const v = present(
      (
        await c.controller.CreateVolume({
          name,
          capacityRange: { requiredBytes: GiB },
          volumeCapabilities: [cap],
          parameters,
        })
      ).volume,
      'CreateVolume: volume',
    );
    this.created.push(v.volumeId);
    return v;
  }

  /** ControllerPublishVolume to the guest's VM; its publish context. */
  async publish(v: GuestVolume): Promise<Record<string, string>> {
    const { c, cap, nodeId } = this.o;
    const r = await c.controller.ControllerPublishVolume({
      volumeId: v.volumeId,
      nodeId,
      volumeCapability: cap,
      volumeContext: v.volumeContext,
    });
    this.published.add(v.volumeId);
    return r.publishContext;
  }

  async unpublish(v: GuestVolume): Promise<void> {
    await this.o.c.controller.ControllerUnpublishVolume({ volumeId: v.volumeId, nodeId: this.o.nodeId });
    this.published.delete(v.volumeId);
  }

  /** NodeStageVolume and NodePublishVolume in the guest (`stageSecrets`: a LUKS passphrase). */
  mount(v: GuestVolume, publishContext: Record<string, string>, stageSecrets?: Record<string, string>): Promise<void> {
    const { n, cap, staging, target } = this.o;
    return stageAndPublish(n, {
      volumeId: v.volumeId,
      publishContext,
      stagingTargetPath: staging,
      targetPath: target,
      volumeCapability: cap,
      volumeContext: v.volumeContext,
      ...(stageSecrets && { stageSecrets }),
    });
  }

  unmount(v: Pick<GuestVolume, 'volumeId'>): Promise<void> {
    return unpublishAndUnstage(this.o.n, {
      volumeId: v.volumeId,
      targetPath: this.o.target,
      stagingTargetPath: this.o.staging,
    });
  }

  /** Unpublishes what is still published, deletes what was created, closes both clients. */
  async close(): Promise<void> {
    const { c, n, nodeId, say } = this.o;
    for (const id of this.published)
      await c.controller.ControllerUnpublishVolume({ volumeId: id, nodeId }).catch(() => undefined);
    for (const id of this.created)
      await c.controller.DeleteVolume({ volumeId: id }).catch((e: unknown) => {
        say(`cleanup of ${id}: ${e instanceof Error ? e.message : String(e)}`);
      });
    c.close();
    n.close();
  }
}
