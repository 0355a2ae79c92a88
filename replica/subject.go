package replica

import (
	"errors"
	"strings"
)

// Subjects: every message of a registration goes to
//
//	<prefix>.<tenant>.<model>
//
// (the registration's home context), so a replica shards by filtering on a
// tenant (<prefix>.<tenant>.>) or a tenant and model. Tenant and model names
// are free text (meta-llama/Llama-3.1-8B) while a NATS subject token may not
// hold '.', '*', '>' or white space: a token keeps ASCII letters, digits,
// '-' and '_' and writes every other byte as %XX (upper-case hex); the empty
// name is the lone token "%" (which no escape produces).

// SubjectToken encodes one name as a subject token.
func SubjectToken(name string) string {
	if name == "" {
		return "%"
	}
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// ErrSubjectToken: a token that SubjectToken cannot have produced.
var ErrSubjectToken = errors.New("conductor: malformed subject token")

// ParseSubjectToken inverts SubjectToken.
func ParseSubjectToken(tok string) (string, error) {
	if tok == "%" {
		return "", nil
	}
	if tok == "" {
		return "", ErrSubjectToken
	}
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_':
			b.WriteByte(c)
		case c == '%' && i+2 < len(tok):
			hi, ok1 := unhex(tok[i+1])
			lo, ok2 := unhex(tok[i+2])
			if !ok1 || !ok2 {
				return "", ErrSubjectToken
			}
			b.WriteByte(hi<<4 | lo)
			i += 2
		default:
			return "", ErrSubjectToken
		}
	}
	return b.String(), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Subject is the subject of a registration's messages.
func Subject(prefix, tenant, model string) string {
	if tenant == "" {
		tenant = "default"
	}
	return prefix + "." + SubjectToken(tenant) + "." + SubjectToken(model)
}

// FilterSubject is a replica's filter: every subject under prefix, or one
// tenant's (model ""), or one tenant's model.
func FilterSubject(prefix, tenant, model string) string {
	switch {
	case tenant == "" && model == "":
		return prefix + ".>"
	case model == "":
		return prefix + "." + SubjectToken(tenant) + ".>"
	case tenant == "":
		return prefix + ".*." + SubjectToken(model)
	}
	return Subject(prefix, tenant, model)
}
