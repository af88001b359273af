/** Invalid configuration: main prints the message on one line and exits with code 2. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}
