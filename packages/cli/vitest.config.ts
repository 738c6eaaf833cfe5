import { project } from "../../vitest.shared.js"

// The CLI suites run the built command as it ships (dist/bundle/effect-durable.mjs): the global setup builds it first.
export default project("@effect-durable/cli", {
  globalSetup: ["../testing/src/VitestSetup.ts", "./test/setup/build.ts"]
})
