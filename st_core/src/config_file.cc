#include "config_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "options.h"

// toml++ (Debian's libtomlplusplus-dev, upstream's single header alike),
// compiled into this file only, without exceptions: parse() returns a result.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#define TOML_ENABLE_FORMATTERS 0
#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif

namespace st {
namespace {

enum class Kind { kString, kInteger, kNumber, kBytes, kBool };

// The TOML type of an option's value.
Kind KindOf(OptionType t) {
  switch (t) {
    case OptionType::kBool:
      return Kind::kBool;
    case OptionType::kPort:
    case OptionType::kCount:
      return Kind::kInteger;
    case OptionType::kSeconds:
    case OptionType::kRate:
      return Kind::kNumber;
    case OptionType::kBytes:
      return Kind::kBytes;
    case OptionType::kString:
    case OptionType::kHostPort:
    case OptionType::kOps:
    case OptionType::kFileId:
      return Kind::kString;
  }
  return Kind::kString;
}

const char* KindText(Kind k) {
  switch (k) {
    case Kind::kString:
      return "a string";
    case Kind::kInteger:
      return "an integer";
    case Kind::kNumber:
      return "a number";
    case Kind::kBytes:
      return "a byte count (an integer, or a string such as \"10G\")";
    case Kind::kBool:
      return "true or false";
  }
  return "?";
}

const char* TypeText(toml::node_type t) {
  switch (t) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date or time";
    default:
      return "nothing";
  }
}

std::string Where(const std::string& source, const toml::source_region& at) {
  return at.begin.line > 0 ? source + ":" + std::to_string(at.begin.line) : source;
}

std::string FormatDouble(double d) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", d);
  return buf;
}

}  // namespace

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> out;
  for (const OptionSpec& s : OptionTable()) {
    if (!(s.flags & kOptCommandLineOnly)) out.push_back(s.name);
  }
  return out;
}

Status ParseConfigText(const std::string& text, const std::string& source,
                       std::vector<ConfigFlag>* out) {
  out->clear();
  toml::parse_result parsed = toml::parse(text, source);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    std::string at = source;
    if (e.source().begin.line > 0) {
      at += ":" + std::to_string(e.source().begin.line) + ":" +
            std::to_string(e.source().begin.column);
    }
    return Status::InvalidArgument(at + ": not valid TOML: " + std::string(e.description()));
  }
  std::map<std::string, std::string> seen;  // flag name -> the key as written
  for (auto&& [raw_key, node] : parsed.table()) {
    std::string key(raw_key.str());
    std::string name = key;
    for (char& c : name) c = c == '_' ? '-' : c;
    std::string at =
        Where(source, raw_key.source().begin.line > 0 ? raw_key.source() : node.source());
    const OptionSpec* known = FindOption(name);
    if (known != nullptr && (known->flags & kOptCommandLineOnly)) {
      return Status::InvalidArgument(at + ": key '" + key +
                                     "' is not allowed in a config file (--" + name +
                                     " is only for the command line)");
    }
    if (known == nullptr) {
      std::string keys;
      for (const std::string& k : ConfigKeys()) keys += (keys.empty() ? "" : ", ") + k;
      return Status::InvalidArgument(at + ": unknown key '" + key +
                                     "' (the keys are st-peer's flags without --: " + keys + ")");
    }
    name = known->name;  // an alias sets its option
    auto [prev, fresh] = seen.emplace(name, key);
    if (!fresh) {
      return Status::InvalidArgument(at + ": key '" + key + "' sets --" + name + ", which '" +
                                     prev->second + "' already set");
    }
    ConfigFlag f;
    f.flag = "--" + name;
    bool ok = false;
    const Kind kind = KindOf(known->type);
    switch (kind) {
      case Kind::kString:
        if (auto v = node.as_string()) f.value = v->get(), ok = true;
        break;
      case Kind::kInteger:
        if (auto v = node.as_integer()) f.value = std::to_string(v->get()), ok = true;
        break;
      case Kind::kNumber:
        if (auto v = node.as_integer()) f.value = std::to_string(v->get()), ok = true;
        if (auto v = node.as_floating_point()) f.value = FormatDouble(v->get()), ok = true;
        break;
      case Kind::kBytes:
        if (auto v = node.as_integer()) f.value = std::to_string(v->get()), ok = true;
        if (auto v = node.as_string()) f.value = v->get(), ok = true;
        break;
      case Kind::kBool:
        if (auto v = node.as_boolean()) {
          ok = true;
          if (!v->get()) continue;  // false: the flag left out
          f.value.clear();
          f.has_value = false;
        }
        break;
    }
    if (!ok) {
      return Status::InvalidArgument(at + ": key '" + key + "' must be " + KindText(kind) +
                                     ", not " + TypeText(node.type()));
    }
    f.where = at + ": " + key + " = " + (f.has_value ? f.value : "true");
    out->push_back(std::move(f));
  }
  return Status::OK();
}

Status ReadConfigFile(const std::string& path, std::vector<ConfigFlag>* out) {
  auto fail = [&path](int err) {
    return Status::IOError("cannot read config file " + path + ": " + std::strerror(err));
  };
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno);
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;  // EISDIR for a directory
      close(fd);
      return fail(err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return ParseConfigText(text, path, out);
}

}  // namespace st
