// What the fixtures need of a tap test: somewhere to register their clean-up. A structural type,
// so a script outside tap (a bench) can pass its own list of closers.
export interface Teardown {
  teardown(fn: () => unknown): void;
}
