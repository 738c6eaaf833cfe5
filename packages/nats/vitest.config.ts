import { project } from "../../vitest.shared.js"

export default project("@effect-durable/nats", { globalSetup: ["../testing/src/VitestSetup.ts"] })
