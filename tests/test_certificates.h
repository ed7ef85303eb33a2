// File: tests/test_certificates.h
//
// Test helper: certificates made with Debian's openssl for tests that speak
// TLS (shards, etcd): a self-signed CA and keys with certificates it signs,
// all as PEM files in one directory.

#ifndef PS_TESTS_TEST_CERTIFICATES_H_
#define PS_TESTS_TEST_CERTIFICATES_H_

#include <string>
#include <vector>

namespace ps::testing {

// Runs /usr/bin/openssl with `args`, its output to `dir`/openssl.log; the
// exit code.
int Openssl(const std::string& dir, std::vector<std::string> args);

// A self-signed CA in `dir`: `ca`.pem and `ca`.key (EC P-256, two days).
bool MakeCertificateAuthority(const std::string& dir, const std::string& ca);

// A key and a certificate for `name` in `dir` (`name`.key, `name`.pem),
// signed by `ca`, with the X.509 extensions in the file `dir`/`extensions`.
bool IssueCertificate(const std::string& dir, const std::string& name,
                      const std::string& ca, const std::string& extensions);

}  // namespace ps::testing

#endif  // PS_TESTS_TEST_CERTIFICATES_H_
