package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serverRead reports whether the server's end of the loopback TCP connection
// c has an empty receive queue, that is whether the server process has read
// what c sent (Linux: /proc/net/tcp, the row whose local address is c's
// remote one and whose remote address is c's local one).
func serverRead(t *testing.T, c net.Conn) bool {
	t.Helper()
	hexAddr := func(a net.Addr) string {
		ta := a.(*net.TCPAddr)
		ip := ta.IP.To4()
		return strings.ToUpper(hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, binary.BigEndian.Uint32(ip)))) +
			fmt.Sprintf(":%04X", ta.Port)
	}
	local, remote := hexAddr(c.RemoteAddr()), hexAddr(c.LocalAddr())
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 && fs[1] == local && fs[2] == remote {
			_, rx, _ := strings.Cut(fs[4], ":")
			n, err := strconv.ParseUint(rx, 16, 64)
			return err == nil && n == 0
		}
	}
	t.Fatalf("no /proc/net/tcp row for %s -> %s", local, remote)
	return false
}

// TestSIGTERMDrainsRequestInProgress: a conductor process told to stop
// (SIGTERM) while a request's body is still arriving serves that request
// once the rest of it arrives, answering with Connection: close, then exits
// 0; a connection with no request in progress is closed at once.
func TestSIGTERMDrainsRequestInProgress(t *testing.T) {
	c := startChild(t, 0, "--shutdown-timeout", "2m")
	query := `{"model":"m","block_size":16,"token_ids":[1,2,3,4]}`
	req := fmt.Sprintf("POST /query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(query), query)
	cut := len(req) - len(query)/2
	arriving, err := net.DialTimeout("tcp", c.addr, waitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer arriving.Close()
	idle, err := net.DialTimeout("tcp", c.addr, waitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(arriving, req[:cut]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to read the request's headers and half its body", func() bool { return serverRead(t, arriving) })
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(waitBound))
	if n, err := idle.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("a connection with no request in progress: read %d, %v; want it closed", n, err)
	}
	waitFor(t, "the shutdown to begin", func() bool { return strings.Contains(c.logs.String(), "shutting down") })
	if _, err := io.WriteString(arriving, req[cut:]); err != nil {
		t.Fatalf("the request in progress was cut: %v", err)
	}
	_ = arriving.SetReadDeadline(time.Now().Add(waitBound))
	out, err := io.ReadAll(arriving)
	if s := string(out); !strings.HasPrefix(s, "HTTP/1.1 200 ") || !strings.Contains(strings.ToLower(s), "connection: close") {
		t.Fatalf("the request in progress at SIGTERM: %q %v\n%s", s, err, tail(c.logs.String()))
	}
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, tail(c.logs.String()))
		}
	case <-time.After(waitBound):
		t.Fatal("no exit after SIGTERM")
	}
}
