import { project } from "../../vitest.shared.js"

export default project("@effect-durable/workflow-http", { globalSetup: ["../testing/src/VitestSetup.ts"] })
