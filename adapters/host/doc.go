// Package host reads the machine a process runs on: whether its processors
// have any time to spare (CPU, from Linux's /proc/stat), and how many of
// Dispatch's worker processes share it (Slots, through lock files), so
// that a worker can batch harder when the machine is saturated and size
// its Go runtime to its share of the processors.
//
// Rule of dependency: this package imports only the standard library. On
// a system without /proc/stat a CPU never reports saturation; where lock
// files cannot be taken a worker counts itself alone; either way a worker
// behaves as it would without this package.
package host
