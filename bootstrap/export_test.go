package bootstrap

// SenderOptions exposes how the worker's webhook sender is configured.
var SenderOptions = senderOptions

// SteadySysmonEnv exposes how SteadySysmon sets GODEBUG.
var SteadySysmonEnv = steadySysmonEnv
