//go:build race

package server

// raceBuild: connections use their own reads and writes (connRawIO).
const raceBuild = true
