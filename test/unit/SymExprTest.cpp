//===- SymExprTest.cpp - The symbolic-integer simplifier ------------------===//
#include "dynafuse/Support/SymExpr.h"
#include "dynafuse/Support/Error.h"

#include <gtest/gtest.h>

#include <random>

using namespace dynafuse;

namespace {
SymExpr sym(const char *name) { return SymExpr::symbol(name); }
} // namespace

TEST(SymExpr, ConstantsFold) {
  EXPECT_EQ((SymExpr(3) + SymExpr(4)).str(), "7");
  EXPECT_EQ((SymExpr(3) * SymExpr(-4)).str(), "-12");
  EXPECT_EQ(floorDiv(SymExpr(-7), SymExpr(2)).str(), "-4");
  EXPECT_EQ(mod(SymExpr(-7), SymExpr(2)).str(), "1");
}

TEST(SymExpr, CanonicalFormIgnoresOrder) {
  SymExpr a = sym("s0") * 4 + sym("i1");
  SymExpr b = sym("i1") + SymExpr(4) * sym("s0");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.str(), b.str());
}

TEST(SymExpr, LikeTermsCombineAndCancel) {
  SymExpr x = sym("x");
  EXPECT_EQ((x + x).str(), "2*x");
  EXPECT_EQ((x - x).str(), "0");
  EXPECT_EQ(((x + 1) * (x - 1)).str(), (x * x - 1).str());
}

TEST(SymExpr, DivisionSimplifies) {
  SymExpr x = sym("x");
  EXPECT_EQ(floorDiv(x * 6 + 12, SymExpr(3)), x * 2 + 4);
  EXPECT_EQ(mod(x * 6 + 12, SymExpr(3)), SymExpr(0));
  EXPECT_EQ(floorDiv(x, SymExpr(1)), x);
  EXPECT_EQ(floorDiv(x + 1, SymExpr(2)).kind(), SymExpr::Kind::FloorDiv);
}

TEST(SymExpr, PrintParseRoundTrip) {
  std::vector<SymExpr> samples = {
      sym("s0") * 4 + sym("i1"),
      floorDiv(sym("i0"), SymExpr(3)) + mod(sym("i0"), sym("s1")) * 2,
      SymExpr(-1) * sym("x") + 5,
      sym("a") * sym("b") * sym("a"),
      mod(sym("i1") + 3, SymExpr(8)),
      floorDiv(sym("i0") * 2 + 1, SymExpr(3)) * 4,
  };
  for (const SymExpr &expr : samples)
    EXPECT_EQ(parseSymExpr(expr.str()).str(), expr.str()) << expr.str();
}

TEST(SymExpr, EvaluateMatchesPythonSemantics) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-50, 50);
  SymExpr x = sym("x"), y = sym("y");
  SymExpr expr = floorDiv(x * 3 + y, SymExpr(7)) * 2 + mod(x - y, SymExpr(5));
  for (int trial = 0; trial < 200; ++trial) {
    int64_t xv = dist(rng), yv = dist(rng);
    int64_t q = floorDivInt(xv * 3 + yv, 7);
    int64_t r = (xv - yv) - floorDivInt(xv - yv, 5) * 5;
    EXPECT_EQ(expr.evaluate({{"x", xv}, {"y", yv}}), q * 2 + r);
    EXPECT_GE(r, 0);
  }
}

TEST(SymExpr, SubstituteAndCollect) {
  SymExpr expr = sym("i0") * sym("s1") + sym("i1");
  std::set<std::string> symbols;
  expr.collectSymbols(symbols);
  EXPECT_EQ(symbols, (std::set<std::string>{"i0", "i1", "s1"}));
  EXPECT_EQ(expr.substitute({{"s1", SymExpr(8)}}), sym("i0") * 8 + sym("i1"));
}

TEST(SymExpr, ErrorsAreReported) {
  EXPECT_THROW(parseSymExpr("s0 +"), Error);
  EXPECT_THROW(parseSymExpr("(s0"), Error);
  EXPECT_THROW(sym("x").evaluate({}), Error);
  EXPECT_THROW(sym("x").constant(), Error);
}

TEST(SymExpr, ZeroDivisorsAreEmptyExtents) {
  // Index arithmetic over an empty dim divides by its zero extent; the
  // loops over it run no iteration, so any index will do.
  EXPECT_EQ(floorDiv(sym("x"), SymExpr(0)), SymExpr(0));
  EXPECT_EQ(mod(sym("x"), SymExpr(0)), SymExpr(0));
  EXPECT_THROW(sym("x").evaluate({}), Error);
}

TEST(SymExpr, RangesSimplifyReshapeIndices) {
  SymExpr i0 = sym("i0"), i1 = sym("i1"), i2 = sym("i2");
  SymRanges ranges = {{"i0", 4}, {"i1", 3}, {"i2", 5}};
  SymExpr flat = i0 * 15 + i1 * 5 + i2;
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, SymExpr(5)), ranges), i0 * 3 + i1);
  EXPECT_EQ(simplifyInRanges(mod(flat, SymExpr(5)), ranges), i2);
  EXPECT_EQ(
      simplifyInRanges(mod(floorDiv(flat, SymExpr(5)), SymExpr(3)), ranges),
      i1);
  // Not provable: i2 + 3 can reach 7 >= 5.
  EXPECT_EQ(simplifyInRanges(floorDiv(i2 + 3, SymExpr(5)), ranges).kind(),
            SymExpr::Kind::FloorDiv);
  int64_t lo, hi;
  ASSERT_TRUE(symRange(flat, ranges, lo, hi));
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 59);
  EXPECT_FALSE(symRange(sym("unknown"), ranges, lo, hi));
}

TEST(SymExpr, MultiplesOfTheDivisorSplitOff) {
  // A flatten of 14x14 read at q + 196*i, q in [0, 196): the multiple of
  // the divisor leaves the floordiv whatever the remainder's range.
  SymExpr q = sym("q"), i = sym("i");
  SymRanges ranges = {{"q", 196}, {"i", 256}};
  SymExpr flat = q + i * 196;
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, SymExpr(14)), ranges),
            i * 14 + floorDiv(q, SymExpr(14)));
  EXPECT_EQ(simplifyInRanges(mod(floorDiv(flat, SymExpr(14)), SymExpr(14)),
                             ranges),
            floorDiv(q, SymExpr(14)));
  EXPECT_EQ(simplifyInRanges(mod(flat, SymExpr(14)), ranges),
            mod(q, SymExpr(14)));
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, SymExpr(196)), ranges), i);
  // Floor semantics hold for negative remainders: (14*i - 1) // 14 is
  // i - 1, (14*i - 1) % 14 is 13.
  SymExpr shifted = i * 14 - 1;
  EXPECT_EQ(simplifyInRanges(floorDiv(shifted, SymExpr(14)), ranges), i - 1);
  EXPECT_EQ(simplifyInRanges(mod(shifted, SymExpr(14)), ranges), SymExpr(13));
  // A numerator inside one multiple of the divisor: [28, 41] // 14 is 2.
  SymRanges small = {{"j", 14}};
  EXPECT_EQ(simplifyInRanges(floorDiv(sym("j") + 28, SymExpr(14)), small),
            SymExpr(2));
  EXPECT_EQ(simplifyInRanges(mod(sym("j") + 28, SymExpr(14)), small),
            sym("j"));
  // Checked against the integer definition on every point.
  for (int64_t qv = 0; qv < 196; qv += 7)
    for (int64_t iv = 0; iv < 4; ++iv) {
      std::map<std::string, int64_t> at = {{"q", qv}, {"i", iv}};
      SymExpr d = simplifyInRanges(floorDiv(flat - 5, SymExpr(14)), ranges);
      SymExpr m = simplifyInRanges(mod(flat - 5, SymExpr(14)), ranges);
      EXPECT_EQ(d.evaluate(at), floorDivInt(qv + 196 * iv - 5, 14));
      EXPECT_EQ(m.evaluate(at), modInt(qv + 196 * iv - 5, 14));
    }
}

TEST(SymExpr, BlocksOfADivisorSplitOff) {
  // swin's window partition of a 56x56x96 map into 7x7 windows, read at
  // (window i, position j, channel k): the flat position 4704*i + 96*j + k
  // has 96*j + k < 4704, so // 37632 is i // 8, free of j and k.
  SymExpr i = sym("i"), j = sym("j"), k = sym("k");
  SymRanges ranges = {{"i", 64}, {"j", 49}, {"k", 96}};
  SymExpr flat = i * 4704 + j * 96 + k;
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, SymExpr(37632)), ranges),
            floorDiv(i, SymExpr(8)));
  EXPECT_EQ(simplifyInRanges(floorDiv(j * 96 + k, SymExpr(672)), ranges),
            floorDiv(j, SymExpr(7)));
  EXPECT_EQ(simplifyInRanges(mod(flat, SymExpr(37632)), ranges),
            mod(i, SymExpr(8)) * 4704 + j * 96 + k);
  // Checked against the integer definition on every point.
  for (int64_t iv = 0; iv < 64; iv += 5)
    for (int64_t jv = 0; jv < 49; jv += 4)
      for (int64_t kv = 0; kv < 96; kv += 13) {
        std::map<std::string, int64_t> at = {{"i", iv}, {"j", jv}, {"k", kv}};
        int64_t value = 4704 * iv + 96 * jv + kv;
        for (int64_t c : {96, 672, 4704, 37632, 9408}) {
          EXPECT_EQ(simplifyInRanges(floorDiv(flat, SymExpr(c)), ranges)
                        .evaluate(at),
                    value / c);
          EXPECT_EQ(
              simplifyInRanges(mod(flat, SymExpr(c)), ranges).evaluate(at),
              value % c);
        }
      }
}

TEST(SymExpr, RangesOfUnknownSymbols) {
  SymExpr flat = sym("i0") * 15 + sym("i1") * 5 + sym("i2");
  SymRanges ranges = {{"i0", 4}, {"i1", 3}, {"i2", 5}};
  int64_t lo, hi;
  ASSERT_TRUE(symRange(flat, ranges, lo, hi));
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 59);
  EXPECT_FALSE(symRange(sym("unknown"), ranges, lo, hi));
}

TEST(SymExpr, MonomialDivisorsDivideExactly) {
  SymExpr s0 = SymExpr::symbol("s0"), s1 = SymExpr::symbol("s1"),
          s2 = SymExpr::symbol("s2");
  EXPECT_EQ(floorDiv(s0 * s1 * 768, s0 * s1 * 12).str(), "64");
  EXPECT_EQ(floorDiv(s0 * s1 * 768 + s0 * 12, s0 * 12).str(), "64*s1 + 1");
  EXPECT_EQ(mod(s0 * s1 * 6, s1 * 3).str(), "0");
  // Not a multiple of every term: stays a division.
  EXPECT_EQ(floorDiv(s0 * s1 + 1, s1).kind(), SymExpr::Kind::FloorDiv);
  // A factor common to both sides cancels: (6*s0) // (4*s0) is 6 // 4.
  EXPECT_EQ(floorDiv(s0 * 6, s0 * 4).str(), "1");
  EXPECT_EQ(floorDiv(s0 * s1 * s2, s0 * s1 * 4).str(), "(s2 // 4)");
  // A product divisor prints in parentheses, so the text reads back.
  SymExpr kept = floorDiv(s0 * s1 + 1, s1 * 64) + mod(s0 + 1, s1 * 2);
  EXPECT_EQ(kept.str(), "((s0 + 1) % (2*s1)) + ((s0*s1 + 1) // (64*s1))");
  EXPECT_EQ(parseSymExpr(kept.str()), kept);
  EXPECT_TRUE(isSizeSymbolName("s12"));
  EXPECT_FALSE(isSizeSymbolName("i0"));
  EXPECT_FALSE(isSizeSymbolName("s"));
}

TEST(SymExpr, SymbolicDivisorsSplitWithSymbolicExtents) {
  // A head split of a [s0, s1, 64] slice read through a permute: loops
  // i0 < s0, i1 < 4, i2 < s1, i3 < 16. The remainder 16*i1 + 64*i2 + i3 is
  // at most 48 + 64*(s1 - 1) + 15 = 64*s1 - 1.
  SymExpr i0 = sym("i0"), i1 = sym("i1"), i2 = sym("i2"), i3 = sym("i3");
  SymExpr s0 = sym("s0"), s1 = sym("s1");
  SymRanges ranges = {{"i1", 4}, {"i3", 16}};
  SymExtents extents = {{"i0", s0}, {"i2", s1}};
  SymExpr flat = i0 * s1 * 64 + i1 * 16 + i2 * 64 + i3;
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, s1 * 64), ranges, extents), i0);
  EXPECT_EQ(simplifyInRanges(mod(flat, s1 * 64), ranges, extents),
            i1 * 16 + i2 * 64 + i3);
  EXPECT_EQ(simplifyInRanges(mod(i0 * s1 + i2, s1), ranges, extents), i2);
  EXPECT_EQ(simplifyInRanges(floorDiv(i0 * s1 + i2, s1), ranges, extents), i0);
  // Nested: the row of a flattened [s0*s1] position, then its column.
  EXPECT_EQ(simplifyInRanges(mod(floorDiv(flat, SymExpr(64)), s1), ranges,
                             extents),
            i2);
  // The multiple splits off even when the rest does not fit.
  EXPECT_EQ(simplifyInRanges(floorDiv(i0 * s1 + i2 + 1, s1), ranges, extents),
            i0 + floorDiv(i2 + 1, s1));
  // A modulo by the divisor is below it whatever its numerator.
  SymExpr wrapped = i0 * s1 + mod(sym("%n"), s1);
  EXPECT_EQ(simplifyInRanges(floorDiv(wrapped, s1), ranges, extents), i0);
}

TEST(SymExpr, SymbolicDivisionsStayWhenUnproven) {
  SymExpr i2 = sym("i2"), s0 = sym("s0"), s1 = sym("s1");
  SymExtents extents = {{"i2", s1}};
  // i2 + 1 reaches s1; i2 - 1 is -1 at i2 = 0.
  EXPECT_EQ(simplifyInRanges(floorDiv(i2 + 1, s1), {}, extents).kind(),
            SymExpr::Kind::FloorDiv);
  EXPECT_EQ(simplifyInRanges(mod(i2 - 1, s1), {}, extents).kind(),
            SymExpr::Kind::Mod);
  // i2 < s1 says nothing of i2 < s0.
  EXPECT_EQ(simplifyInRanges(mod(i2, s0), {}, extents).kind(),
            SymExpr::Kind::Mod);
  // Without its extent, i2 is unbounded.
  EXPECT_EQ(simplifyInRanges(mod(i2, s1), {}).kind(), SymExpr::Kind::Mod);
  // A kernel value may be negative; a non-size symbol may be 0.
  EXPECT_EQ(simplifyInRanges(floorDiv(sym("%n"), s1), {}, extents).kind(),
            SymExpr::Kind::FloorDiv);
  EXPECT_EQ(simplifyInRanges(mod(i2, sym("i9")), {}, extents).kind(),
            SymExpr::Kind::Mod);
  // s1 - i2 is in [1, s1]: the multiple s1 splits off, -i2 // s1 stays
  // (-1 but at i2 = 0).
  EXPECT_EQ(simplifyInRanges(floorDiv(s1 - i2, s1), {}, extents),
            floorDiv(SymExpr(0) - i2, s1) + 1);
}

TEST(SymExpr, SymbolicBlocksOfADivisorSplitOff) {
  // (16*i + j) // (64*s1) with j < 16 is i // (4*s1), free of j.
  SymExpr i = sym("i"), j = sym("j"), s0 = sym("s0"), s1 = sym("s1");
  SymRanges ranges = {{"j", 16}};
  SymExtents extents = {{"i", s0 * s1 * 4}};
  SymExpr flat = i * 16 + j;
  EXPECT_EQ(simplifyInRanges(floorDiv(flat, s1 * 64), ranges, extents),
            floorDiv(i, s1 * 4));
  EXPECT_EQ(simplifyInRanges(mod(flat, s1 * 64), ranges, extents),
            mod(i, s1 * 4) * 16 + j);
  // Symbolic blocks: (s1*a + b) // (4*s1) with b < s1 is a // 4.
  SymExpr a = sym("a"), b = sym("b");
  SymExtents blocks = {{"a", s0 * 4}, {"b", s1}};
  EXPECT_EQ(simplifyInRanges(floorDiv(a * s1 + b, s1 * 4), {}, blocks),
            floorDiv(a, SymExpr(4)));
  EXPECT_EQ(simplifyInRanges(mod(a * s1 + b, s1 * 4), {}, blocks),
            mod(a, SymExpr(4)) * s1 + b);
}

TEST(SymExpr, SymbolicDivisionsMatchTheDefinition) {
  // Every rule checked against Python's // and % on every point, for sizes
  // 2, 3 and a prime (capture specializes 0 and 1).
  SymExpr i0 = sym("i0"), i1 = sym("i1"), i2 = sym("i2");
  SymExpr s0 = sym("s0"), s1 = sym("s1");
  SymRanges ranges = {{"i1", 4}};
  SymExtents extents = {{"i0", s0}, {"i2", s1}};
  std::vector<SymExpr> numerators = {
      i0 * s1 * 4 + i1 * s1 + i2, i0 * s1 + i2,     i1 * s1 + i2 - 1,
      i0 * s1 * 8 + i2 * 2 + 1,   s1 * 3 - i2 - 1,  i1 * 16 + i2 * 64,
      i0 * s0 * s1 + i2 * s0 + i1, mod(i0 + i2, s1) + i1 * s1};
  std::vector<SymExpr> divisors = {s1,     s1 * 4, s1 * 2, s0 * s1,
                                   s1 * 64, s0,     SymExpr(4)};
  for (const SymExpr &n : numerators)
    for (const SymExpr &d : divisors) {
      SymExpr q = simplifyInRanges(floorDiv(n, d), ranges, extents);
      SymExpr r = simplifyInRanges(mod(n, d), ranges, extents);
      for (int64_t s0v : {2, 3, 7})
        for (int64_t s1v : {2, 3, 13})
          for (int64_t i0v = 0; i0v < s0v; ++i0v)
            for (int64_t i1v = 0; i1v < 4; ++i1v)
              for (int64_t i2v = 0; i2v < s1v; ++i2v) {
                std::map<std::string, int64_t> at = {
                    {"s0", s0v}, {"s1", s1v}, {"i0", i0v}, {"i1", i1v},
                    {"i2", i2v}};
                int64_t nv = n.evaluate(at), dv = d.evaluate(at);
                ASSERT_EQ(q.evaluate(at), floorDivInt(nv, dv))
                    << n.str() << " // " << d.str() << " as " << q.str();
                ASSERT_EQ(r.evaluate(at), modInt(nv, dv))
                    << n.str() << " % " << d.str() << " as " << r.str();
              }
    }
}

TEST(SymExpr, NonNegativeForSizesOfAtLeastTwo) {
  SymExpr s0 = SymExpr::symbol("s0"), s1 = SymExpr::symbol("s1");
  EXPECT_TRUE(provablyNonNegative(s0 - 2));
  EXPECT_FALSE(provablyNonNegative(s0 - 3));
  EXPECT_TRUE(provablyNonNegative(s0 * s1 - s0 - s1));  // (2+a)(2+b)-4-a-b
  EXPECT_FALSE(provablyNonNegative(s1 - s0));
  EXPECT_TRUE(provablyNonNegative(SymExpr(0)));
  EXPECT_FALSE(provablyNonNegative(SymExpr(-1)));
  // Loop variables and divisions are not sizes: nothing is claimed.
  EXPECT_FALSE(provablyNonNegative(SymExpr::symbol("i0")));
  EXPECT_FALSE(provablyNonNegative(floorDiv(s0, 4)));
}
