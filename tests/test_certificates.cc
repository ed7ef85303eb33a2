#include "tests/test_certificates.h"

#include "tests/child_process.h"

namespace ps::testing {

int Openssl(const std::string& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/openssl");
  return RunToCompletion(args, dir + "/openssl.log");
}

bool MakeCertificateAuthority(const std::string& dir, const std::string& ca) {
  return Openssl(dir, {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                       "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                       dir + "/" + ca + ".key", "-out", dir + "/" + ca + ".pem",
                       "-days", "2", "-subj", "/CN=ps test " + ca}) == 0;
}

bool IssueCertificate(const std::string& dir, const std::string& name,
                      const std::string& ca, const std::string& extensions) {
  return Openssl(dir, {"req", "-newkey", "ec", "-pkeyopt",
                       "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                       dir + "/" + name + ".key", "-out",
                       dir + "/" + name + ".csr", "-subj", "/CN=" + name}) ==
             0 &&
         Openssl(dir,
                 {"x509", "-req", "-in", dir + "/" + name + ".csr", "-CA",
                  dir + "/" + ca + ".pem", "-CAkey", dir + "/" + ca + ".key",
                  "-CAcreateserial", "-out", dir + "/" + name + ".pem", "-days",
                  "2", "-extfile", dir + "/" + extensions}) == 0;
}

}  // namespace ps::testing
