#!/usr/bin/env python3
"""Write the multilingual relevance set (sections.jsonl, queries.jsonl, qrels.tsv) next to
this script from the data below. Run from this folder: python3 build.py. See README.md."""
import json
import os
os.chdir(os.path.dirname(os.path.abspath(__file__)))
# (id, title, content, query or None)
S = [
# French
("fr-cafe", "Le café du coin", "Le café près de la gare ouvre à sept heures. On y sert un crème, des croissants et une tarte aux pommes ; le patron prépare aussi un thé à la menthe très apprécié.", "cafe pres de la gare horaires"),
("fr-eleve", "Inscription des élèves", "L'inscription des élèves au lycée se fait en ligne avant le 15 juillet. Il faut joindre le bulletin de l'année précédente et une pièce d'identité.", "inscription des eleves au lycee"),
("fr-noel", "Marché de Noël", "Le marché de Noël s'installe sur la place de l'Hôtel de Ville dès la fin novembre : vin chaud, pain d'épices et décorations artisanales.", "marche de noel hotel de ville"),
("fr-sante", "Santé et sécurité au travail", "L'employeur évalue les risques pour la santé et la sécurité des salariés et met à jour le document unique chaque année.", "sante securite des salaries"),
("fr-theatre", "Théâtre municipal", "Le théâtre municipal présente cette saison une pièce de Molière et deux créations contemporaines ; les billets sont en vente à la billetterie.", "theatre piece de moliere billets"),
("fr-fenetre", "Fenêtres et rénovation énergétique", "Remplacer des fenêtres à simple vitrage par du double vitrage réduit les pertes de chaleur ; une aide de l'État peut financer une partie des travaux.", "aide de l'etat pour changer les fenetres"),
("fr-foret", "Forêt de Fontainebleau", "La forêt de Fontainebleau attire les grimpeurs pour ses blocs de grès ; des sentiers balisés traversent les gorges d'Apremont.", "escalade en foret de fontainebleau gres"),
("fr-deja", "Déjà-vu et mémoire", "Le déjà-vu est l'impression d'avoir déjà vécu une situation présente ; les chercheurs l'attribuent à un décalage entre familiarité et souvenir.", "impression de deja vu memoire"),
# German
("de-strasse", "Straßensperrung in der Innenstadt", "Wegen Bauarbeiten ist die Hauptstraße zwischen Marktplatz und Bahnhof bis Ende März gesperrt; Busse fahren eine Umleitung.", "hauptstrasse gesperrt bauarbeiten"),
("de-gebuehr", "Gebühren für den Reisepass", "Die Gebühr für einen Reisepass beträgt für Personen ab 24 Jahren 70 Euro; für Jüngere gilt ein ermäßigter Betrag.", "gebuhr reisepass euro"),
("de-muell", "Mülltrennung", "Bioabfälle gehören in die braune Tonne, Verpackungen in die gelbe Tonne und Altpapier in die blaue Tonne. Glas wird nach Farben getrennt.", "mulltrennung gelbe tonne"),
("de-groesse", "Größentabelle für Schuhe", "Die Größentabelle rechnet europäische Schuhgrößen in britische und amerikanische Größen um; bei Zwischengrößen empfehlen wir die größere.", "schuhgrossen umrechnen tabelle"),
("de-uebung", "Übungen für den Rücken", "Drei einfache Übungen stärken die Rückenmuskulatur: Katzenbuckel, Brücke und Vierfüßlerstand, jeweils zehn Wiederholungen.", "ubungen fur den rucken"),
("de-fruehstueck", "Frühstück im Hotel", "Das Frühstück wird von 6:30 bis 10:00 Uhr im Wintergarten serviert; glutenfreie Brötchen gibt es auf Nachfrage.", "fruhstuck hotel glutenfreie brotchen"),
("de-kaese", "Käse aus dem Allgäu", "Der Bergkäse aus dem Allgäu reift mindestens vier Monate; er wird aus Heumilch hergestellt.", "bergkase allgau heumilch"),
# Spanish
("es-educacion", "Educación pública", "La educación pública es gratuita desde los tres años; la matrícula para el próximo curso se abre en marzo.", "educacion publica matricula"),
("es-informacion", "Información para viajeros", "La oficina de información turística está en la plaza mayor y abre de lunes a sábado; allí se pueden pedir mapas y horarios de autobús.", "oficina de informacion turistica sabado"),
("es-manana", "El tiempo para mañana", "Mañana se esperan lluvias débiles en el norte y temperaturas más altas en el sur, con máximas de veintiocho grados.", "el tiempo manana lluvias"),
("es-nino", "Vacunas para niños", "El calendario de vacunación para niños incluye una dosis contra el sarampión a los doce meses y un refuerzo a los tres años.", "vacunas ninos sarampion"),
("es-cancion", "Canción del verano", "La canción del verano de este año mezcla reguetón y flamenco; lleva semanas en el número uno de las listas.", "cancion del verano numero uno"),
("es-pinguino", "Pingüinos de la Patagonia", "En la Patagonia argentina vive una colonia de pingüinos de Magallanes que se puede visitar de septiembre a abril.", "pinguinos patagonia visita"),
("es-jamon", "Jamón ibérico", "El jamón ibérico de bellota procede de cerdos criados en libertad que se alimentan de bellotas durante la montanera.", "jamon iberico de bellota"),
# Portuguese (diacritics, tilde)
("pt-coracao", "Coração e exercício", "A prática regular de exercício físico fortalece o coração e reduz a pressão arterial; recomenda-se meia hora por dia.", "exercicio fisico coracao pressao"),
# Chinese
("zh-backup", "数据库备份", "每天凌晨两点自动备份数据库，备份文件保存三十天。恢复数据时请先停止应用服务。", "how do I restore from a 数据库 backup"),
("zh-weather", "北京天气预报", "北京明天晴转多云，最高气温二十五度，最低气温十二度，北风三级。", "北京明天的天气怎么样"),
("zh-subway", "上海地铁", "上海地铁二号线连接浦东机场和虹桥机场，全程大约需要一个半小时。", "which 地铁 line goes to the airport in Shanghai"),
("zh-tea", "绿茶的冲泡方法", "冲泡绿茶时水温以八十度左右为宜，第一泡大约一分钟，可以续泡三次。", "绿茶 water temperature"),
("zh-password", "修改密码", "登录后进入个人设置页面，点击修改密码，输入旧密码和新密码后保存即可。", "how to change my 密码"),
("zh-invoice", "发票报销流程", "出差回来后一周内提交发票，由部门经理审批，财务部门在十个工作日内报销。", "出差的发票怎么报销"),
("zh-panda", "大熊猫", "大熊猫主要生活在四川的山区，以竹子为主要食物，每天要吃十几公斤竹子。", "what do 熊猫 eat"),
("zh-holiday", "春节放假安排", "春节放假七天，从除夕开始，节后第一天上班。", "春节 holiday how many days"),
# Japanese
("ja-tokyo", "東京の観光", "東京タワーと浅草寺は東京で人気の観光地です。浅草寺の近くには仲見世通りがあります。", "浅草寺 near which street"),
("ja-ramen", "ラーメンの作り方", "スープは豚骨を十時間煮込んで作ります。麺は細麺を使い、チャーシューとネギをのせます。", "how long to boil ラーメン soup"),
("ja-train", "新幹線の予約", "新幹線の指定席はインターネットで一か月前から予約できます。東京から大阪まで約二時間半です。", "新幹線 tokyo to osaka how long"),
("ja-sakura", "桜の開花予想", "今年の桜の開花は例年より早く、東京では三月二十日ごろと予想されています。", "when will 桜 bloom in tokyo"),
("ja-earthquake", "地震のときの行動", "地震が起きたら、まず机の下に隠れて頭を守ってください。揺れが収まってから火を消しましょう。", "what to do in a 地震"),
("ja-garbage", "ゴミの出し方", "燃えるゴミは月曜日と木曜日、資源ゴミは水曜日に出してください。", "which day for 資源ゴミ"),
# Korean
("ko-kimchi", "김치 만드는 법", "배추를 소금에 절인 뒤 고춧가루, 마늘, 젓갈로 양념을 만들어 버무립니다.", "how to make 김치"),
("zh-return", "退货政策", "收到商品七天内可以无理由退货，运费由买家承担。", "can I send items back, 退货 rules"),
("ja-visa", "ビザの申請", "観光ビザの申請には、パスポート、写真、残高証明書が必要です。", "ビザ申請に必要な書類"),
("es-senal", "Señales de tráfico", "Las señales de tráfico triangulares indican peligro; las circulares, prohibición u obligación.", "senales de trafico triangulares"),
("de-aerzte", "Ärztlicher Notdienst", "Der ärztliche Notdienst ist nachts und am Wochenende unter der Nummer 116117 erreichbar.", "arztlicher notdienst wochenende"),
]
# Distractors: same languages, near topics, no query.
D = [
("fr-cafe-2", "Le café en Colombie", "La Colombie produit un café arabica cultivé en altitude ; la récolte principale a lieu d'octobre à décembre."),
("fr-gare", "Travaux à la gare", "La gare du Nord sera partiellement fermée pendant les travaux de modernisation des quais cet été."),
("fr-lycee", "Résultats du baccalauréat", "Les résultats du baccalauréat sont publiés début juillet sur le site de l'académie."),
("fr-theatre-2", "Histoire du théâtre grec", "Le théâtre grec antique est né des fêtes en l'honneur de Dionysos ; la tragédie et la comédie y sont apparues."),
("de-bahnhof", "Neuer Bahnhof", "Der neue Bahnhof wird im Herbst eröffnet und bietet barrierefreie Zugänge zu allen Gleisen."),
("de-pass", "Personalausweis beantragen", "Den Personalausweis beantragen Sie persönlich im Bürgerbüro; bringen Sie ein biometrisches Foto mit."),
("de-schuhe", "Schuhe pflegen", "Lederschuhe sollten regelmäßig gereinigt und mit Schuhcreme gepflegt werden, damit sie nicht austrocknen."),
("de-hotel", "Hotelbewertungen", "Gäste loben die ruhige Lage des Hotels und das freundliche Personal an der Rezeption."),
("es-tiempo", "Clima de Madrid", "Madrid tiene un clima continental con inviernos fríos y veranos muy calurosos y secos."),
("es-turismo", "Turismo rural", "El turismo rural crece en Castilla y León gracias a las casas rurales y las rutas a caballo."),
("es-escuela", "Comedor escolar", "El comedor escolar ofrece menús sin gluten y sin lactosa bajo petición de las familias."),
("zh-backup-2", "服务器监控", "服务器的内存和磁盘使用率每五分钟采集一次，超过阈值会发送告警邮件。"),
("zh-weather-2", "上海天气", "上海今天有小雨，气温十八到二十二度，东南风二级。"),
("zh-tea-2", "红茶的历史", "红茶起源于福建武夷山，十七世纪传入欧洲，深受英国人喜爱。"),
("zh-airport", "首都机场", "北京首都机场有三个航站楼，机场快轨可以直达市区。"),
("ja-tokyo-2", "京都の寺", "京都には清水寺や金閣寺など多くの有名な寺があります。"),
("ja-food", "寿司の種類", "寿司には握り寿司、巻き寿司、ちらし寿司などの種類があります。"),
("ja-train-2", "在来線の定期券", "在来線の定期券は駅の窓口か券売機で購入できます。"),
("en-coffee", "Coffee brewing", "Use water just off the boil and a medium grind; a French press needs about four minutes of steeping."),
("en-backup", "Backups", "Take a full backup weekly and incremental backups daily; test restores every quarter."),
("en-password", "Password policy", "Passwords must be at least twelve characters long and are rotated every ninety days."),
("en-weather", "Weather in Beijing", "Beijing has hot, humid summers and cold, dry winters with occasional sandstorms in spring."),
]
with open("sections.jsonl", "w") as f:
    for sid, t, c, *_ in S + [d + (None,) for d in D]:
        f.write(json.dumps({"id": sid, "title": t, "content": c}, ensure_ascii=False) + "\n")
with open("queries.jsonl", "w") as q, open("qrels.tsv", "w") as r:
    n = 0
    for sid, t, c, query in S:
        n += 1
        qid = "ml-%02d" % n
        q.write(json.dumps({"id": qid, "query": query}, ensure_ascii=False) + "\n")
        r.write("%s\t0\t%s\t1\n" % (qid, sid))
print(len(S), "queries", len(S) + len(D), "sections")
