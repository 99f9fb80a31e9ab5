package bootstrap

// SenderOptions exposes how the worker's webhook sender is configured.
var SenderOptions = senderOptions

// DevKey exposes the API key `dispatch dev` makes when none is set.
var DevKey = devKey
