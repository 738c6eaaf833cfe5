/**
 * A seeded pseudo-random source (mulberry32), so a run's schedule, victims and rollbacks can
 * be replayed with `--seed`. Not for anything that needs real randomness.
 */
export interface Random {
  /** A float in [0, 1). */
  readonly next: () => number
  /** An integer in [min, max]. */
  readonly between: (min: number, max: number) => number
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  readonly shuffle: <A>(items: ReadonlyArray<A>) => Array<A>
}

export const make = (seed: number): Random => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const between = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  return {
    next,
    between,
    pick: (items) => items[between(0, items.length - 1)]!,
    shuffle: (items) => {
      const copy = [...items]
      for (let i = copy.length - 1; i > 0; i--) {
        const j = between(0, i)
        ;[copy[i], copy[j]] = [copy[j]!, copy[i]!]
      }
      return copy
    }
  }
}

/**
 * Whether message `index` is rolled back on purpose: a pure function of the seed and the
 * index, so a retried command decides the same way every time.
 */
export const rollsBack = (seed: number, index: number, share: number): boolean =>
  make((seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0).next() < share
