import { project } from "../../vitest.shared.js"

export default project("@effect-durable/projector", { globalSetup: ["../testing/src/VitestSetup.ts"] })
