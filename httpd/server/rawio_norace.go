//go:build !race

package server

// raceBuild: connections use raw I/O where they can (connRawIO).
const raceBuild = false
