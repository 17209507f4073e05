package tidemark.udf;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.util.HashMap;
import java.util.HashSet;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The fast path of Tidemark's record validation (tidemark.records.parse_records).
 *
 * <p>One pass of Jackson's streaming parser over the line. It claims a line only when it is sure
 * the SQL validator would accept it with the same field values, and returns the record's fields;
 * for every other line (anything malformed, mistyped, duplicated, nested, unusual) it returns
 * NULL and the SQL validator, which names the reason, decides. It never produces a reason itself,
 * so the quarantine's messages have one source. The rules that depend on configuration or on the
 * line's bytes (size, UTF-8, minimum event time, clock skew) stay in SQL for every line; a line
 * with a NUL byte is never claimed.
 *
 * <p>It parses the same String with the same factory as Spark's parse_json
 * (VariantBuilder.parseJson: {@code new JsonFactory().createParser(String)}), so both see the
 * same tokens. Returned row: event_id, host, event_time, msg_time, key, value, heartbeat.
 */
public final class RecordParser implements UDF1<String, Row> {
  private static final long serialVersionUID = 1L;

  /** Must equal tidemark.records.HOST_PATTERN (a test checks); matched with find(), as rlike. */
  public static final String HOST_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$";

  /** Must equal tidemark.records.MAX_ID_CHARS (a test checks). */
  public static final int MAX_ID_CHARS = 256;

  /** Spark SQL type of the returned row. */
  public static final String RETURN_TYPE =
      "struct<event_id:string,host:string,event_time:bigint,msg_time:bigint,"
          + "key:string,value:double,heartbeat:boolean>";

  // Far below any size limit of the variant parser; longer lines go the SQL way.
  private static final int MAX_CHARS = 1 << 20;
  // Significant digits a decimal may have for Double.parseDouble to equal Spark's
  // decimal-to-double cast (both exact below 2^53, then one correctly rounded division).
  private static final int MAX_DECIMAL_DIGITS = 15;
  // ... and a power of ten that is exact as a long and as a double.
  private static final int MAX_DECIMAL_SCALE = 18;

  private static final JsonFactory FACTORY = new JsonFactory();
  private static final Pattern HOST = Pattern.compile(HOST_PATTERN);
  // Hosts already matched against HOST, per task thread: a source has thousands of hosts and
  // each sends many records. Bounded; emptied when full. 1M lines: 400 -> 337 ns a line.
  private static final int HOST_CACHE_MAX = 1 << 16;
  private static final ThreadLocal<HashMap<String, Boolean>> HOSTS =
      ThreadLocal.withInitial(HashMap::new);
  private static final String[] KNOWN = {
    "event_id", "host", "event_time", "msg_time", "key", "value", "heartbeat"
  };

  @Override
  public Row call(String line) {
    // A NUL byte decodes to U+0000 and nothing else does: such a line is quarantined in SQL.
    // Spark decodes the line's bytes with replacement (UTF8String.toString): invalid UTF-8 comes
    // here as U+FFFD, and so the line is left to SQL, which names it; a line without U+FFFD is
    // valid UTF-8 (UTF8String.isValid agreed on 30M random byte sequences), so SQL does not
    // check a claimed line's bytes again. A literal U+FFFD also goes the SQL way.
    if (line == null
        || line.length() > MAX_CHARS
        || line.indexOf('\u0000') >= 0
        || line.indexOf('\uFFFD') >= 0) {
      return null;
    }
    try (JsonParser p = FACTORY.createParser(line)) {
      return parse(p);
    } catch (Exception e) { // malformed JSON and anything else: the SQL validator decides
      return null;
    }
  }

  private static Row parse(JsonParser p) throws java.io.IOException {
    if (p.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String eventId = null;
    String host = null;
    String key = null;
    Long eventTime = null;
    Long msgTime = null;
    Double value = null;
    Boolean heartbeat = null;
    int seen = 0;
    HashSet<String> others = null;
    for (JsonToken t = p.nextToken(); t != JsonToken.END_OBJECT; t = p.nextToken()) {
      if (t != JsonToken.FIELD_NAME) {
        return null;
      }
      String name = p.currentName();
      JsonToken v = p.nextToken();
      if (v == null || v.isStructStart()) {
        return null; // nested values: their duplicate keys would fail the variant parse
      }
      int slot = slot(name);
      if (slot < 0) {
        if (looksLikeKnown(name)) {
          return null;
        }
        if (others == null) {
          others = new HashSet<>();
        }
        if (!others.add(name)) {
          return null;
        }
        if (v.isNumeric() && p.getTextLength() > 64) {
          return null;
        }
        continue;
      }
      if ((seen & (1 << slot)) != 0) {
        return null; // a duplicate key fails the variant parse
      }
      seen |= 1 << slot;
      if (v == JsonToken.VALUE_NULL) {
        continue; // JSON null is an absent field
      }
      switch (slot) {
        case 0:
        case 1:
        case 4:
          if (v != JsonToken.VALUE_STRING) {
            return null;
          }
          String text = p.getText();
          if (hasSurrogate(text)) {
            return null;
          }
          if (slot == 0) {
            eventId = text;
          } else if (slot == 1) {
            host = text;
          } else {
            key = text;
          }
          break;
        case 2:
        case 3:
          if (!isLong(p, v)) {
            return null;
          }
          if (slot == 2) {
            eventTime = p.getLongValue();
          } else {
            msgTime = p.getLongValue();
          }
          break;
        case 5:
          if (isLong(p, v)) {
            value = (double) p.getLongValue();
          } else if (v == JsonToken.VALUE_NUMBER_FLOAT) {
            value = plainDecimal(p.getText());
            if (value == null) {
              return null;
            }
          } else {
            return null;
          }
          break;
        default:
          if (v != JsonToken.VALUE_TRUE && v != JsonToken.VALUE_FALSE) {
            return null;
          }
          heartbeat = v == JsonToken.VALUE_TRUE;
      }
    }
    if (p.nextToken() != null) {
      return null; // trailing content: the variant parser ignores it, leave such a line to SQL
    }
    boolean isHeartbeat = heartbeat != null && heartbeat;
    if (!isHeartbeat
        && (eventId == null || isBlank(eventId) || eventId.length() > MAX_ID_CHARS)) {
      return null;
    }
    if (host == null || !validHost(host) || eventTime == null) {
      return null;
    }
    return RowFactory.create(eventId, host, eventTime, msgTime, key, value, isHeartbeat);
  }

  /** HOST.matcher(host).find(), remembered per host. */
  static boolean validHost(String host) {
    HashMap<String, Boolean> seen = HOSTS.get();
    Boolean ok = seen.get(host);
    if (ok == null) {
      ok = HOST.matcher(host).find();
      if (seen.size() >= HOST_CACHE_MAX) {
        seen.clear();
      }
      seen.put(host, ok);
    }
    return ok;
  }

  private static int slot(String name) {
    for (int i = 0; i < KNOWN.length; i++) {
      if (KNOWN[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  /** A field that differs from a known name only in case: leave the matching rules to SQL. */
  private static boolean looksLikeKnown(String name) {
    for (String known : KNOWN) {
      if (known.equalsIgnoreCase(name)) {
        return true;
      }
    }
    return false;
  }

  private static boolean isLong(JsonParser p, JsonToken v) throws java.io.IOException {
    if (v != JsonToken.VALUE_NUMBER_INT) {
      return false;
    }
    JsonParser.NumberType type = p.getNumberType();
    return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG;
  }

  /** A decimal without exponent and with few digits, else NULL (the SQL path converts it). */
  private static Double plainDecimal(String text) {
    int digits = 0; // significant: from the first non-zero digit on
    int scale = -1; // digits after the point
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c >= '0' && c <= '9') {
        if (digits > 0 || c != '0') {
          digits++;
        }
        if (scale >= 0) {
          scale++;
        }
      } else if (c == '.') {
        scale = 0;
      } else if (c != '-' || i != 0) {
        return null; // exponent
      }
    }
    if (digits == 0 || digits > MAX_DECIMAL_DIGITS || scale > MAX_DECIMAL_SCALE) {
      return null; // zeros (the sign of -0.0), long mantissas, tiny magnitudes
    }
    return Double.parseDouble(text);
  }

  private static boolean hasSurrogate(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (Character.isSurrogate(s.charAt(i))) {
        return true;
      }
    }
    return false;
  }

  /** Spark's trim strips spaces (U+0020) only. */
  private static boolean isBlank(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (s.charAt(i) != ' ') {
        return false;
      }
    }
    return true;
  }
}
