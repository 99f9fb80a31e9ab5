package bootstrap

// SenderOptions exposes how the worker's webhook sender is configured.
var SenderOptions = senderOptions

// SteadySysmonEnv exposes how SteadySysmon sets GODEBUG.
var SteadySysmonEnv = steadySysmonEnv

// ProcessorShare exposes a worker's share of the machine's processors.
var ProcessorShare = processorShare

// WithSlotDir returns cfg with the folder where workers count each other.
func WithSlotDir(cfg Config, dir string) Config {
	cfg.slotDir = dir
	return cfg
}

// MachineShare exposes a worker's count of the workers on its machine.
type MachineShare = machineShare

// WithSaturation returns cfg for a machine whose saturation saturated
// tells, in place of the machine's own.
func WithSaturation(cfg Config, saturated func() bool) Config {
	cfg.saturated = saturated
	return cfg
}

// Readers exposes how many workers on a machine read.
var Readers = readers

// WorkerGCModule exposes the worker's garbage collection target, and
// WorkerGCPercent its value.
var (
	WorkerGCModule  = workerGCModule
	WorkerGCPercent = workerGCPercent
)

// DevKey exposes the API key `dispatch dev` makes when none is set.
var DevKey = devKey
