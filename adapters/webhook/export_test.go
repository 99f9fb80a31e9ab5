package webhook

import "crypto/x509"

// TrustRoots makes s accept certificates signed by roots (a test server's),
// before its first send.
func (s *Sender) TrustRoots(roots *x509.CertPool) {
	s.client.TLSConfig.RootCAs = roots
}
