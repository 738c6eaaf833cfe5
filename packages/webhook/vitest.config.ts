import { project } from "../../vitest.shared.js"

export default project("@effect-durable/webhook", { globalSetup: ["../testing/src/VitestSetup.ts"] })
