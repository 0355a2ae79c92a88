//go:build !linux

package server

import "net"

// rawIO is Linux only (rawio.go); elsewhere connections use their own
// methods.
type rawIO struct{}

func newRawIO(net.Conn) *rawIO { return nil }

func (*rawIO) Read(c net.Conn, p []byte) (int, error)  { return c.Read(p) }
func (*rawIO) Write(c net.Conn, p []byte) (int, error) { return c.Write(p) }
