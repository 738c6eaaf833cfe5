import { project } from "../../vitest.shared.js"

export default project("@effect-durable/http", { globalSetup: ["../testing/src/VitestSetup.ts"] })
