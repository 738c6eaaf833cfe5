// The embedded server moved to @effect-durable/embedded (the development database builds on
// it too); this module keeps the names the testing package has always used.
export {
  directoryExists,
  freePort,
  processAlive,
  type Server as EmbeddedServer,
  startThrowaway as startEmbedded,
  type ThrowawayOptions as EmbeddedOptions
} from "@effect-durable/embedded/EmbeddedPostgres"
