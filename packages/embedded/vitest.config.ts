import { project } from "../../vitest.shared.js"

export default project("@effect-durable/embedded")
