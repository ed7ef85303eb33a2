// File: base/address_list.h
//
// A comma-separated list of host:port addresses as flags give them
// (--servers, --etcd): each address with the spaces around it dropped, and
// empty entries left out, so that "a:1, b:2," is {"a:1", "b:2"}.

#ifndef PS_BASE_ADDRESS_LIST_H_
#define PS_BASE_ADDRESS_LIST_H_

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace ps {

inline std::vector<std::string> SplitAddressList(absl::string_view list) {
  std::vector<std::string> addresses;
  for (absl::string_view address : absl::StrSplit(list, ',')) {
    address = absl::StripAsciiWhitespace(address);
    if (!address.empty()) addresses.emplace_back(address);
  }
  return addresses;
}

}  // namespace ps

#endif  // PS_BASE_ADDRESS_LIST_H_
