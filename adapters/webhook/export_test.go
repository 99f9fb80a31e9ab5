package webhook

import "crypto/x509"

// TrustRoots makes s accept certificates signed by roots (a test server's),
// before its first send.
func (s *Sender) TrustRoots(roots *x509.CertPool) {
	s.client.TLSConfig.RootCAs = roots
}

// PeekAfterIdle is how long a kept-alive connection idles before a send
// checks that the endpoint has not closed it.
const PeekAfterIdle = peekAfterIdle
