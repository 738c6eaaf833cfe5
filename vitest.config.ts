import { defineConfig } from "vitest/config"

// `test.projects` replaces the vitest.workspace.ts file that vitest 3.2 deprecates.
export default defineConfig({
  test: {
    projects: ["packages/*", "chaos"],
    reporters: ["default"],
    // Two test files at a time: most of a file's time is spent waiting (on PostgreSQL, a spawned
    // command, a browser, a lease), so two of them share the machine's two cores well. On the
    // 2-core machine the default is one, and the suite then took 13 minutes instead of 9. Vitest 5
    // schedules by each project's own value, set in vitest.shared.ts; this one is the root's
    // (its reports), kept equal.
    maxWorkers: 2
  }
})
