import { project } from "../../vitest.shared.js"

export default project("@effect-durable/workflow", { globalSetup: ["../testing/src/VitestSetup.ts"] })
