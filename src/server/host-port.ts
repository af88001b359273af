// `host:port` of a listen address (IPv6 in brackets; no host = all interfaces). Its own module so
// the configuration loads without the metrics code (prom-client is loaded only when metrics are on).
export function splitHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  const host = i > 0 ? address.slice(0, i).replace(/^\[|\]$/g, '') : '0.0.0.0';
  const port = Number(address.slice(i + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad port in ${address}`);
  return { host, port };
}
