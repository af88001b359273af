// Where a day-2 subcommand gets its inputs: the Kubernetes API (src/k8s, loaded on first use)
// and the driver's own Proxmox config — the same config.yaml, from a file (--config, or
// PROXMOX_CSI_CONFIG as in the chart's Job/CronJob pods, where the Secret is mounted) or straight
// from the Secret through the API (--config-secret, for a laptop).
import { ConfigError } from '../config/errors.js';
import { parseProxmoxConfig, readProxmoxConfig } from '../config/proxmox-file.js';
import type { ProxmoxConfig } from '../config/types.js';
import { openKube, type KubeApi } from '../k8s/index.js';
import type { CommonFlags } from './common.js';

export function kubeFrom(common: CommonFlags, env: NodeJS.ProcessEnv): Promise<KubeApi> {
  return openKube({
    env,
    ...(common.kubeconfig && { kubeconfig: common.kubeconfig }),
    ...(common.context && { context: common.context }),
  });
}

/** undefined when neither --config, --config-secret nor PROXMOX_CSI_CONFIG says where it is. */
export async function proxmoxConfigFrom(
  common: CommonFlags,
  env: NodeJS.ProcessEnv,
  kube: () => Promise<KubeApi>,
  signal?: AbortSignal,
): Promise<ProxmoxConfig | undefined> {
  if (common.config && common.configSecret) throw new ConfigError('--config and --config-secret exclude each other');
  if (common.configSecret) {
    const { namespace, name, key } = common.configSecret;
    const where = `Secret ${namespace}/${name}`;
    const secret = await (await kube()).getSecret(namespace, name, signal);
    if (!secret) throw new ConfigError(`--config-secret: ${where} does not exist`);
    const b64 = secret.data?.[key];
    if (b64 === undefined)
      throw new ConfigError(
        `--config-secret: ${where} has no key ${key} (keys: ${Object.keys(secret.data ?? {}).join(', ') || 'none'})`,
      );
    return parseProxmoxConfig(Buffer.from(b64, 'base64').toString('utf8'), `${where} key ${key}`);
  }
  const file = common.config ?? env.PROXMOX_CSI_CONFIG;
  return file ? readProxmoxConfig(file) : undefined;
}
