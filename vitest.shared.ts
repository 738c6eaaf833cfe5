// One definition of how every package's tests run, so the packages stay alike.
import { defineProject, type UserWorkspaceConfig } from "vitest/config"

// Workspace packages resolve to their TypeScript sources (the "source" export condition),
// so tests never run against a stale build, and a fresh clone needs no build before `npm test`.
// The rest are vite's server defaults, which a custom list replaces.
const conditions = ["source", "module", "node", "development|production"]

export const project = (name: string, extra: UserWorkspaceConfig["test"] = {}): UserWorkspaceConfig =>
  defineProject({
    resolve: { conditions },
    ssr: { resolve: { conditions } },
    // Vitest loads a project's global setup (the shared embedded server) in an environment of its
    // own, `__vitest__`, whose resolve options replace the two above: without this line it
    // resolved workspace packages to dist/, which exists only after a build.
    environments: { __vitest__: { resolve: { conditions } } },
    test: {
      name,
      include: ["test/**/*.test.ts"],
      // Two test files at a time (see vitest.config.ts). Vitest 5 takes this per project: the
      // root's value alone left every project at its default, one file at a time on 2 cores.
      maxWorkers: 2,
      testTimeout: 60_000,
      hookTimeout: 120_000,
      ...extra
    }
  })
