//===- GuardBuilder.h - Sources and guards of one capture ------*- C++ -*-===//
//
// Owns what a capture records about where values come from (sources, each
// added once) and what it relied on (guards, each added once except tensor
// guards); the tracer asks it for sources and hands it guards, and the
// captured frame takes both at the end.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_GUARDBUILDER_H
#define DYNAFUSE_CAPTURE_GUARDBUILDER_H

#include "Guards.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class GuardBuilder {
public:
  /// The id of `source`, added unless an identical one is already there.
  int addSource(Source source);
  int namedSource(Source::Kind kind, int parent, PyObject *name);
  int indexedSource(Source::Kind kind, int parent, int index);
  /// Adds a guard unless an identical one is already there.
  void addGuard(Guard guard);
  /// A guard on the object at `source`: Equals, Identity or TypeIs (expected:
  /// the value, the object or its type), NoAttribute or NoInstanceAttribute
  /// (expected: the name), NoKey or HasKey (expected: the dict key).
  void guardObject(Guard::Kind kind, int source, PyObject *expected);
  /// A guard relating the objects at two sources: SameObject or
  /// OtherObject.
  void guardRelation(Guard::Kind kind, int source, int other);
  const std::vector<Guard> &guards() const { return guardList; }
  const Source &source(int id) const { return sources.at(size_t(id)); }
  const std::vector<Source> &allSources() const { return sources; }
  /// How the guards describe the source ("L['x'].weight").
  std::string describe(int id) const {
    return sources.at(size_t(id)).describe(sources);
  }
  /// Moves the sources and guards out (the builder is empty afterwards).
  void moveInto(std::vector<Source> &sources, std::vector<Guard> &guards);

private:
  std::vector<Source> sources;
  std::vector<Guard> guardList;
  std::map<std::string, int> sourceIds;
};

} // namespace capture
} // namespace dynafuse

#endif
