// The one rule for control characters, for every name, id, path, address and parameter the
// program accepts (requests, StorageClass parameters, flags): C0 (U+0000–U+001F), DEL (U+007F)
// and C1 (U+0080–U+009F). None belongs in a volume name, handle, path or host name, and passing
// one on would reach log lines, volume handles, mount sources and system calls.

// eslint-disable-next-line no-control-regex -- control characters are exactly what this matches
export const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/;

export const hasControlCharacter = (s: string): boolean => CONTROL_CHARACTER.test(s);
