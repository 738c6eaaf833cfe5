import { project } from "../vitest.shared.js"

export default project("@effect-durable/chaos", { globalSetup: ["../packages/testing/src/VitestSetup.ts"] })
