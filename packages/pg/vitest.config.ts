import { project } from "../../vitest.shared.js"

export default project("@effect-durable/pg", { globalSetup: ["../testing/src/VitestSetup.ts"] })
