import { project } from "../../vitest.shared.js"

// The CLI suites run the built binary (dist/bin.js): the global setup builds it first.
export default project("@effect-durable/cli", {
  globalSetup: ["../testing/src/VitestSetup.ts", "./test/setup/build.ts"]
})
