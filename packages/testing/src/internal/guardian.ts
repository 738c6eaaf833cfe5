// Moved to @effect-durable/embedded, with the embedded server it guards.
export { spawnGuardian } from "@effect-durable/embedded/Guardian"
