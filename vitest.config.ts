import { defineConfig } from "vitest/config"

// `test.projects` replaces the vitest.workspace.ts file that vitest 3.2 deprecates.
export default defineConfig({
  test: {
    projects: ["packages/*", "chaos"],
    reporters: ["default"]
  }
})
